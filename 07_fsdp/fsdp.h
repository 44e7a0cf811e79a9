// defines: FullyShardedDataParallel, the chapter's lesson: each unit's parameters sharded over the
// ranks, gathered whole only while the unit computes, its gradients reduce-scattered to their owners.
#pragma once
#include <torch/torch.h>

#include <functional>
#include <future>
#include <string>
#include <vector>

#include "common/group/process_group.h"

namespace ch07 {

// A unit: the parameters FSDP gathers, frees and reduces together (PyTorch: one fully_shard()
// call), and how it computes. The course cuts its models by layer (units.h).
struct UnitSpec {
  std::string name;                                         // "fc1"
  std::shared_ptr<torch::nn::Module> module;                // its parameters
  std::function<torch::Tensor(const torch::Tensor&)> forward;  // the layer and what follows it up to the next unit
};

// How the two halves run: chapter 03's ring (ring_halves.h); the same with the reduce-scatter
// summing in PyTorch's Gloo's order (Note [Summing in Gloo's order]); or c10d's own collectives
// (all_gather_into_tensor, reduce_scatter_tensor), which LibTorch 2.x's Gloo has and 1.13's lacks.
enum class Collectives { kRing, kRingInGlooOrder, kC10d };

class FullyShardedDataParallel {
 public:
  // Cuts each unit's parameters into shards (Note [Sharding a unit]), keeps this rank's, and
  // frees the whole ones. Every rank must start from the same parameters (the same seed: no
  // broadcast). `prefetch`: how many units ahead an all-gather is issued (Note [Prefetch]).
  FullyShardedDataParallel(std::vector<UnitSpec> units, ddp::Group& group, Collectives collectives, int prefetch);

  // The model's forward, unit by unit: gather, compute, free (Note [A step of FSDP]). Under
  // torch::NoGradGuard (validation) nothing is set up for backward.
  torch::Tensor forward(const torch::Tensor& x);

  // What the optimizer steps: this rank's rows of each parameter (PyTorch: each DTensor's local
  // tensor), leaves whose .grad() the reduce-scatter fills. Some may have no rows.
  const std::vector<torch::Tensor>& parameters() const { return shard_params_; }

  // model.set_requires_gradient_sync(False) in PyTorch: while alive, backward keeps the whole
  // gradients and reduces nothing; the first backward after it reduce-scatters their sum.
  class NoSync {
   public:
    explicit NoSync(FullyShardedDataParallel& f) : f_(f) { f_.sync_ = false; }
    ~NoSync() { f_.sync_ = true; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    FullyShardedDataParallel& f_;
  };
  std::unique_ptr<NoSync> no_sync() { return std::make_unique<NoSync>(*this); }

  // Each parameter of parameters(), for checkpoints: its name ("fc1.weight"), its whole shape,
  // and the rows this rank owns (Note [Sharding a unit]): from first_row, chunk_rows of them at most.
  struct ParamInfo {
    std::string name;
    std::vector<int64_t> shape;
    int64_t first_row = 0, chunk_rows = 0;
  };
  const std::vector<ParamInfo>& param_info() const { return info_; }
  size_t units() const { return units_.size(); }

  // Every parameter whole, as copies, in the module's order (gathered from every rank: call it
  // on every rank): for the fingerprint, the check, --save-params.
  std::vector<torch::Tensor> full_parameters();

  // The element counts a learner compares with the formulas (Note [What each rank holds]).
  struct Sizes {
    int64_t params = 0;       // every parameter, whole
    int64_t shard = 0;        // this rank's shards, padding included
    int64_t largest_unit = 0; // the largest unit's parameters: what a rank holds whole at once, without prefetch
  };
  Sizes sizes() const;
  // For the log: "3 units: fc1 (401920 elements, 200960 a rank), ...".
  std::string describe() const;
  int64_t bytes_sent() const { return bytes_sent_; }  // by this rank's collectives, since the start
  int64_t recut_bytes() const { return recut_bytes_; }  // of them, the re-cuts' (Note [Summing in Gloo's order])

 private:
  struct Unit {
    std::string name;
    std::function<torch::Tensor(const torch::Tensor&)> forward;
    std::vector<torch::Tensor> params;  // the module's own: whole while gathered, no storage otherwise
    size_t first_param = 0;      // where its shards start in shard_params_
    std::vector<int64_t> rows, row_elems, chunk_rows, offsets;  // per parameter: see Note [Sharding a unit]
    int64_t shard_numel = 0;     // this rank's shard of the unit, padding included (the same on every rank)
    int64_t numel = 0;           // its parameters' elements, whole
    torch::Tensor shard;         // it, flat: what this rank owns
    torch::Tensor gathered;      // world x shard_numel while an all-gather fills it
    std::future<int64_t> gathering;  // the all-gather in flight (prefetched), if any
    bool whole = false;          // params hold the gathered values
    bool reduced = true;         // its gradients of this backward are reduce-scattered (or kept: no_sync)
  };

  void issue_all_gather(size_t u);  // start it (another thread) unless in flight or whole
  void unshard(size_t u);           // wait for it, copy the values into the parameters
  void reshard(size_t u);           // free the parameters' storage
  void pre_backward(size_t u);      // before unit u's backward: whole again, prefetch the next
  void post_backward(size_t u);     // after it: reduce-scatter its gradients, free
  void finish_backward();           // the units no hook reached (the first: its input needs no gradient)
  void reduce_scatter_past_the_lesson(size_t u, const torch::Tensor& in, const torch::Tensor& mine);  // --collectives gloo-order, c10d
  int tag(size_t u, int kind) const;

  std::vector<Unit> units_;
  std::vector<torch::Tensor> shard_params_;
  std::vector<ParamInfo> info_;
  ddp::Group& group_;
  Collectives collectives_;
  int prefetch_;
  bool sync_ = true;
  bool in_backward_ = false;
  int64_t bytes_sent_ = 0, recut_bytes_ = 0;
};

}  // namespace ch07
