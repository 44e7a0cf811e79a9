// defines: powersgd_hook, PyTorch's powerSGD_hook with its PowerSGDState, a communication hook
// for the DDP class: each bucket's gradient matrices all-reduced as two thin factors P and Q
// (Note [PowerSGD] in powersgd.cpp).
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "05_ddp/ddp.h"
#include "common/group/process_group.h"
#include "common/observe/flight_recorder.h"

namespace ddp {

struct PowerSgdOptions {
  int64_t rank = 1;  // matrix_approximation_rank
  // start_powerSGD_iter: plain all-reduces before it. PyTorch's default is 1000; ours is the
  // trainer's default --warmup-steps (100), about 7% of a 3-epoch run at 2 ranks: PyTorch's
  // advice is 10% of the steps, and no fewer than the warm-up's (Note [PowerSGD]).
  int64_t start_iter = 100;
  double min_compression_rate = 2;  // PyTorch's default; not a flag
};

// ddp_model.register_comm_hook(PowerSGDState(...), powerSGD_hook) in PyTorch. Throws UsageError
// for a rank below 1, a start below 2 (PyTorch's ValueError), a rank that compresses no tensor of
// `params` (the DDP class's parameters()), or a rank above 2 without LAPACK (linalg.qr).
CommHook powersgd_hook(Group& group, const PowerSgdOptions& o, const std::vector<torch::Tensor>& params);

// The state of PowerSGDState (error feedback on, warm start on, random_seed 0, epsilon 0), and
// the hook in two halves: launch() when the bucket is complete, finish() once its collective is
// done. Every rank calls both for every bucket, in bucket order.
class PowerSgd {
 public:
  PowerSgd(Group& group, const PowerSgdOptions& o, const std::vector<torch::Tensor>& params);

  // Bucket `index`'s gradients, as they are (not divided), in `flat`; `grads` are views into
  // it, one per parameter. Starts its collectives and returns the one the caller waits for.
  Pending launch(size_t index, torch::Tensor& flat, const std::vector<torch::Tensor>& grads, const std::string& tag);
  // After that wait: the rest of the hook; leaves the average in `flat`. `last`: the backward's
  // last bucket (PyTorch's bucket.is_last(): the step counter moves).
  void finish(size_t index, bool last);

 private:
  struct Matrix {
    torch::Tensor m, p, q;  // m: the gradient as shape[0] x rest (a view into the bucket); p: n x r, q: m x r (views)
  };
  struct BucketState {
    torch::Tensor error;            // error feedback: what compression lost last time, added back
    torch::Tensor p_memory, q_memory;  // every P and Q of the bucket, side by side (warm start)
    // This step's:
    bool compressing = false;
    torch::Tensor flat, input;  // the bucket, and a copy of it before compression (for the error)
    std::vector<Matrix> matrices;
    std::vector<torch::Tensor> uncompressed;
    torch::Tensor uncompressed_memory;
    Pending first;  // the uncompressed tensors' all-reduce, when it and P's were both started
    bool first_pending = false;
    std::string tag;
  };
  int64_t seed();  // numpy's RandomState(0).randint(1_000_000_000)

  Group& group_;
  PowerSgdOptions o_;
  std::map<size_t, BucketState> buckets_;
  std::mt19937 rng_{0};  // numpy's legacy RandomState(0) is this generator: init_genrand(0)
  int64_t iter_ = 0;
  int64_t step_bytes_ = 0, step_full_bytes_ = 0, step_matrices_ = 0, step_pq_floats_ = 0, step_plain_floats_ = 0;
  bool reported_ = false;
};

}  // namespace ddp
