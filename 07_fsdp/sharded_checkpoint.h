// defines: ShardedCheckpoints: each rank writes its own shard of the parameters and of the
// optimizer state, atomically; a run resumes from them at the same world or at another, cut anew.
#pragma once
#include <torch/torch.h>

#include <string>

#include "05_ddp/trainer/options.h"
#include "05_ddp/trainer/resume.h"
#include "07_fsdp/fsdp.h"

namespace ch07 {

// Note [Sharded checkpoints]
// No rank holds the whole model, so none writes it: rank r writes its rows of every parameter
// and of their optimizer state to <checkpoints>/rank-<r>/ckpt-<step>.pt, atomically (Note
// [Atomic checkpoints]: the temporary file, fsync, rename), with where its rows start, the world
// that wrote it and the run's identity. A step is resumable only when the file of every rank of
// that world is intact: one rank killed between its write and the others' leaves a step that is
// skipped for the one before it. Every rank reads the same files and so picks the same step,
// which is then checked across the ranks. Every rank first reads old rank 0's file (the run's
// identity, its world, the index below); at the same world each then reads its own file back:
// the same bits. At another world no rank puts a parameter together whole: the new world cuts
// each parameter as Note [Sharding a unit] does, and rank 0's file holds an index of where every
// old rank's rows lie (rows.<name>); each new rank opens only the old files that hold rows of
// its own, one at a time, and copies those rows of the parameter and of its state (elementwise
// like it) into its shard. What a rank holds while it loads is its shard and one old file: the
// memory report counts it (its peak counts from the model's construction on, the load included).
// Whether every old file is intact is checked by the ranks together, each opening its own share
// of them. PyTorch's distributed checkpoint (DCP) loads the same way, at a finer grain: its
// planner takes the saved chunks' offsets and sizes from the checkpoint's .metadata and asks only
// for the chunks that overlap the rank's own shard (torch/distributed/checkpoint/
// default_planner.py, create_default_local_load_plan, and planner_helpers.py,
// create_read_items_for_chunk_list, PyTorch 2.11); its reader loads each such chunk and narrows
// it to the overlap (filesystem.py, FileSystemReader.read_data), one chunk at a time, where we
// open one old rank's whole file at a time. A checkpoint of another run (model, optimizer,
// data, a shape) is refused intact, as 05's (Note [Never lose a run]).
class ShardedCheckpoints {
 public:
  ShardedCheckpoints(std::string dir, ddp::SamplerState sampler, const ddp::TrainerOptions& o, FullyShardedDataParallel& fsdp,
                     torch::optim::Optimizer& opt, ddp::Group& group);
  // The step to start from: 0 after --reset (removing every rank's checkpoints) or with none.
  int64_t resume_or_reset(const ddp::TrainerOptions& o);
  void save(int64_t step);  // every rank writes its file, then a barrier

 private:
  int64_t resume();
  std::string dir_;
  ddp::SamplerState sampler_;
  std::string model_name_;
  int keep_;
  FullyShardedDataParallel& fsdp_;
  torch::optim::Optimizer& opt_;
  ddp::Group& group_;
  int64_t saved_ = -1;
};

}  // namespace ch07
