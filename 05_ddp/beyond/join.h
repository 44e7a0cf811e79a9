// defines: Join: uneven inputs (--uneven-shards) and PyTorch's Join context for DDP (--join,
// --divide-by-live-ranks). See Note [Uneven inputs and Join] in join.cpp.
#pragma once
#include <torch/torch.h>

#include <cstdint>

#include "05_ddp/ddp.h"
#include "05_ddp/trainer/options.h"
#include "common/data/sampler.h"
#include "common/group/process_group.h"

namespace ddp {

// `with Join([ddp_model]):` around the loop. Built once before it; each step asks it which
// micro-batches this rank runs, and at each epoch's end it syncs the final model.
class Join {
 public:
  // Checks the flags (UsageError: --join needs --uneven-shards, and what it cannot shadow), and
  // turns the sampler's padding off with --uneven-shards.
  Join(const TrainerOptions& o, DistributedDataParallel& ddp, DistributedSampler& sampler, Group& group,
       const torch::Device& device);

  // The end of step `step`'s micro-batches [first, last) on this rank, which holds `own` samples
  // this epoch: `last`, or `first` (none: it runs out of data here). Without --uneven-shards
  // always `last`, with no collective. With --join every rank first says whether it still
  // trains (an all-reduce: the ranks still training), and a rank out of data runs DDP's join
  // hook: it shadows the step's bucket all-reduces with zeros.
  int64_t end_of_batches(int64_t step, int64_t own, int64_t first, int64_t last);

  // At each epoch's end (and training's): with --join, every rank takes the model of the last
  // rank to run out of data (the highest rank among those that trained the last step).
  void sync_final_model();

 private:
  DistributedDataParallel& ddp_;
  Group& group_;
  torch::Device device_;
  int64_t batch_;
  bool uneven_, join_, divide_by_live_;
  bool trained_last_step_ = true, said_ = false, fewer_ = false;
};

}  // namespace ddp
