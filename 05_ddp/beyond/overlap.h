// defines: OverlapShare: how much of the all-reduce time was hidden behind backward, measured by
// watching the DDP class (Note [Overlap share]).
#pragma once
#include <cstdint>

#include "05_ddp/ddp.h"

namespace ddp {

class OverlapShare {
 public:
  // Starts watching every synchronising backward of `ddp` but the first (it rebuilds the buckets).
  void watch(DistributedDataParallel& ddp);

  double comm_us = 0;    // all-reduces in flight (their union), summed over backwards
  double hidden_us = 0;  // the part of it before backward's last gradient was ready
  int64_t backwards = 0;
  double share() const { return comm_us > 0 ? hidden_us / comm_us : 0; }
};

}  // namespace ddp
