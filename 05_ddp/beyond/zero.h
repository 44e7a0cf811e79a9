// defines: ZeroRedundancyOptimizer, ZeRO stage 1 (--zero): each rank keeps and steps the
// optimizer state of its own share of the parameters (Note [ZeRO-1: optimizer state sharded]).
#pragma once
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <vector>

#include "05_ddp/trainer/sharded_state.h"
#include "common/group/process_group.h"

namespace ddp {

// Note [ZeRO-1: optimizer state sharded]
// Plain data parallelism keeps N copies of everything: the parameters, the gradients and the
// optimizer state (SGD's momentum: one tensor per parameter; AdamW's two moments: two) on every
// rank, and every rank computes the same update from the same averaged gradients. ZeRO stage 1
// (Rajbhandari et al., 2020) notices that the update of a parameter needs only that parameter's
// state, and that only one rank needs to compute it. So each parameter is given an owner; the
// owner alone keeps its state and steps it, and then sends the new values to the other ranks.
// The state per rank falls towards 1/world (only as far as whole tensors allow: zero.md's table
// shows how far from it the course's models stay); the gradients are still all-reduced (DDP is
// unchanged) and every rank still holds every parameter (stages 2 and 3 shard those too).
//
// This is torch.distributed.optim.ZeroRedundancyOptimizer (parameters_as_bucket_view=False,
// overlap_with_ddp=False), step for step, in 1.13 and 2.x alike:
// - The partition: the parameters sorted by size, largest first (a stable sort: ties keep their
//   order), each to the rank holding the fewest elements so far (the lowest such rank). Greedy
//   on whole tensors: a model of a few large tensors cannot be split evenly (the MLP's fc1.weight
//   alone is 75% of it), so a rank may hold much more than 1/world, and a rank may hold nothing.
// - step(): the learning rate (any option) of param_groups() is copied into the local
//   optimizer, which steps this rank's parameters only; then every parameter is broadcast from
//   its owner, one broadcast per parameter, rank 0's first.
// - The arithmetic of an update is element by element, so stepping a subset computes the same
//   bits as stepping all: a --zero run ends with the same fingerprint as the run without it.
// - Checkpoints: consolidate_state_dict(to) gathers the shards on one rank (Python broadcasts
//   each rank's state_dict as an object; here each rank's state tensors as one flat tensor).
//   save() then writes what the same optimizer without --zero would write, so a checkpoint does
//   not record the world size it was sharded over: a --zero run resumes at any world size, and
//   with or without --zero. load() reads the whole state and keeps this rank's share.
class ZeroRedundancyOptimizer : public torch::optim::Optimizer, public ShardedState {
 public:
  // Builds the optimizer the flags ask for over a list of parameters (the local shard or all).
  using Factory = std::function<std::unique_ptr<torch::optim::Optimizer>(const std::vector<torch::Tensor>&)>;

  ZeroRedundancyOptimizer(const std::vector<torch::Tensor>& params, Factory make, Group& group);

  torch::Tensor step(LossClosure closure = nullptr) override;

  // Every rank must call it: the shards gathered on rank `to`, for the next save() there.
  void consolidate_state_dict(int to = 0) override;
  // The whole state as the optimizer without --zero saves it; consumes the consolidated copy
  // (the rank then keeps only its shard again). Throws unless consolidate_state_dict() ran here.
  void save(torch::serialize::OutputArchive& archive) const override;
  // A checkpoint's whole state (written with or without --zero): this rank keeps its share.
  void load(torch::serialize::InputArchive& archive) override;

  const torch::optim::Optimizer& local() const override { return *local_; }
  // The rank that owns each parameter, in the order given to the constructor.
  const std::vector<int>& owners() const { return owner_; }

 private:
  void sync_options_to_local();
  void log_state_bytes();

  Factory make_;
  Group& group_;
  std::vector<torch::Tensor> params_;
  std::vector<int> owner_;
  std::vector<std::vector<size_t>> shards_;  // each rank's parameters, largest first
  std::unique_ptr<torch::optim::Optimizer> local_;
  mutable std::unique_ptr<torch::optim::Optimizer> consolidated_;  // on `to`, between consolidate and save
  bool logged_ = false;
};

// The greedy partition by size of ZeroRedundancyOptimizer._partition_parameters: each
// parameter's owner, for tensors of these sizes (numel) at `world` ranks.
std::vector<int> partition_by_size(const std::vector<int64_t>& numels, int world);

}  // namespace ddp
