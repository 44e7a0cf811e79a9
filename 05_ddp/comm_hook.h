// defines: what a communication hook is given and returns (PyTorch's GradBucket and the Future of
// hook(state, bucket)), and the plain sum every bucket gets without one. Used by ddp.h.
#pragma once
#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

#include "common/group/process_group.h"
#include "common/observe/flight_recorder.h"

namespace ddp {

// A bucket's reduction in flight: the collective to wait for (none: `work.work` is null) and
// what turns its result into the bucket's average once it is done (nothing, for a plain sum).
// issue(group, ...) starts a collective and returns at once with a Pending: c10d's Work (the
// handle chapter 03's send and recv returned), numbered by the flight recorder, which names a
// rank when one fails; wait(group, pending) blocks until it is done (flight_recorder.h).
struct Reduction {
  Pending work;
  std::function<void()> finish;
};

// What a communication hook is given: PyTorch's GradBucket.
struct GradBucket {
  size_t index;
  bool is_last;                          // the backward's last bucket
  torch::Tensor buffer;                  // the gradients as they are (not divided), side by side
  std::vector<torch::Tensor> gradients;  // views into `buffer`, shaped as the parameters
  std::string tag;                       // "bucket0": its name in the flight recorder and --trace
};

// A hook starts the bucket's collectives and returns them; the bucket's average must be in
// `buffer` once the Reduction is waited for and finished (PyTorch's hook(state, bucket) ->
// Future). fp16 and PowerSGD are hooks (beyond/); --skip-rank wraps one (beyond/faults.cpp).
using CommHook = std::function<Reduction(GradBucket&)>;

// The plain sum of `bucket.buffer` over `group`, started: what a bucket gets without a hook (the
// class divided each gradient while copying it in: Note [Divide before the sum], ddp.cpp).
Reduction allreduce_sum(Group& group, GradBucket& bucket);

}  // namespace ddp
