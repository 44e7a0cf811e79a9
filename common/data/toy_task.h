// defines: the toy regression task of chapters 03-04: model, data, single-process reference, checks.
#pragma once
#include <torch/torch.h>

#include <string>
#include <vector>

#include "common/basics/cli.h"
#include "common/group/compat.h"
#include "common/group/process_group.h"

namespace ddp::toy {

constexpr int kFeatures = 8, kHidden = 16;

// Linear(8,16) -> Tanh -> Linear(16,1), initialised from `seed` (the same on every rank).
torch::nn::Sequential make_model(uint64_t seed);

// The batch of `rank` at `step`: rows [rank*B, (rank+1)*B) of the step's global batch of
// world*B samples. Values come from integer arithmetic in double (exact, and the same in
// tests/ddp_reference.py), so every process and language sees bit-identical data. Made on the
// CPU, returned on `device` (a rank's GPU under NCCL).
std::pair<torch::Tensor, torch::Tensor> batch(int step, int rank, int per_rank, int world,
                                              const torch::Device& device = torch::kCPU);

struct TrainConfig {
  int steps = 20;
  double lr = 0.05;
  int batch = 8;  // per rank
  uint64_t seed = 0;
  std::string optimizer = "sgd";  // sgd | adam
  double momentum = 0;
};

// The stock optimizer cfg names (SGD with cfg.momentum, or Adam) over `params`: the same
// construction for the chapters and for the single-process reference they are checked against.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::vector<torch::Tensor>& params, const TrainConfig& cfg);

// The flags of chapters 03-04, defined once: --steps --lr --batch --seed --save-init
// --save-params --trace (04 adds its own).
struct TrainFlags {
  TrainConfig cfg;
  std::string save_init, save_params;  // rank 0 writes parameters here (torch::pickle_save)
  std::string trace;                   // --trace: see common/observe/run_trace.h
};
void add_train_flags(CLI::App& app, TrainFlags& flags);

// One process, the global batch of every step (world*batch samples): what data parallelism
// must reproduce, on the chapters' device. Returns the final parameters.
std::vector<torch::Tensor> train_single_process(const TrainConfig& cfg, int world, const torch::Device& device);

// Note [Tolerance against one process]
// Averaging per-rank mean gradients, (1/R) sum_r (1/B) sum_i g_i, is the mean over all R*B
// samples, which one process computes as (1/RB) sum_i g_i: the same number in exact arithmetic,
// but float32 sums in another order round differently. Twenty steps of this model drift by at
// most 3.3e-7 (SGD, momentum and Adam at 1-4 ranks; 04's README shows a run at 3.28e-07); a real bug
// (a missing division, a stale gradient) is off by far more.
constexpr double kTolerance = 1e-5;

// Averages each step's loss over the ranks, logs it on rank 0 (first step, every fifth, last)
// and remembers the first and the last.
class LossLog {
 public:
  LossLog(Group& group, int steps) : group_(group), steps_(steps) {}
  void add(int step, const torch::Tensor& loss);
  double first = 0, last = 0;

 private:
  Group& group_;
  int steps_;
};

// The self-checks of chapters 03-04, each logged with OK or FAILED: every rank holds the same
// parameters; they equal train_single_process() within kTolerance; the loss went down. Logs
// the fingerprint, saves the parameters (rank 0, if `save_path` is set), then throws
// CheckFailed (exit 1) naming the first check that failed.
void check_training(Group& group, const std::vector<torch::Tensor>& params, const TrainConfig& cfg, const LossLog& loss,
                    const std::string& save_path);

// Largest |a - b| over all parameters.
double max_abs_diff(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b);

// True when every rank holds bit-identical parameters (all-reduce MAX == all-reduce MIN).
bool replicas_identical(Group& g, const std::vector<torch::Tensor>& params);

// FNV-1a over the parameters' bytes: equal fingerprints = bit-identical parameters.
std::string fingerprint(const std::vector<torch::Tensor>& params);

// Writes the parameters with torch::pickle_save (Python reads them with torch.load),
// atomically: a temporary file, then rename.
void save_params(const std::vector<torch::Tensor>& params, const std::string& path);

}  // namespace ddp::toy
