// defines: the count of the collectives a process group ran, for a check to read (exercise 03.2).
#pragma once

#include "common/group/process_group.h"

namespace ddp {

// Note [Counted by the backend]
// A check that wants to know how many collectives a program ran cannot count what the program
// reports (a trace span is one line of code to fake). The backend numbers its collectives
// itself, as torch.distributed's init_process_group starts it doing (c10d's
// setSequenceNumberForGroup; Python reads it as _get_sequence_number_for_group): each
// collective (all-reduce, broadcast, barrier, ...) adds one. With DDP_COUNT_COLLECTIVES=1 in
// the environment, joining starts the numbering, and leaving prints one line:
//   [rank 0/3] the process group ran 23 collectives (DDP_COUNT_COLLECTIVES)
// Exercise 03.2's check reads it; without the variable nothing changes.

// After the backend is made (init_process_group): with DDP_COUNT_COLLECTIVES=1, number from here.
void count_collectives_if_asked(Group& g);
// Before the backend shuts down (Group::destroy): the line above, when counting and no
// exception is unwinding.
void report_collective_count(const Group& g) noexcept;

}  // namespace ddp
