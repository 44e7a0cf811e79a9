// defines: check_sum_of_ranks(): the self-check taught in 01 (all-reduce of the ranks = n(n-1)/2).
#pragma once
#include "common/group/process_group.h"

namespace ddp {

// All-reduces every rank's number, checks the sum against n(n-1)/2, logs the check, then
// waits at a barrier. Throws CheckFailed on a wrong sum.
void check_sum_of_ranks(Group& group);

}  // namespace ddp
