// defines: ShardedState, what an optimizer whose state is spread over the ranks offers the
// checkpoint (ZeRO is one: going_further/zero.md), so that checkpoint() need not know it.
#pragma once
#include <torch/torch.h>

namespace ddp {

class ShardedState {
 public:
  virtual ~ShardedState() = default;
  // Every rank calls it before rank `to` saves: the shards gathered there.
  virtual void consolidate_state_dict(int to) = 0;
  // The optimizer each rank steps its shard with (what the checkpoint names: "sgd", "adamw").
  virtual const torch::optim::Optimizer& local() const = 0;
};

}  // namespace ddp
