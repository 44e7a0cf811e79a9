// defines: the toy regression task of chapters 03-04: model, data, single-process reference, checks.
#pragma once
#include <torch/torch.h>

#include <string>
#include <vector>

#include "common/compat.h"
#include "common/process_group.h"

namespace ddp::toy {

constexpr int kFeatures = 8, kHidden = 16;

// Linear(8,16) -> Tanh -> Linear(16,1), initialised from `seed` (the same on every rank).
torch::nn::Sequential make_model(uint64_t seed);

// The batch of `rank` at `step`: rows [rank*B, (rank+1)*B) of the step's global batch of
// world*B samples. Values come from integer arithmetic in double (exact, and the same in
// tests/ddp_reference.py), so every process and language sees bit-identical data.
std::pair<torch::Tensor, torch::Tensor> batch(int step, int rank, int per_rank, int world);

struct TrainConfig {
  int steps = 20;
  double lr = 0.05;
  int batch = 8;  // per rank
  uint64_t seed = 0;
  std::string optimizer = "sgd";  // sgd | adam
  double momentum = 0;
};

// One process, the global batch of every step (world*batch samples): what data parallelism
// must reproduce. Returns the final parameters.
std::vector<torch::Tensor> train_single_process(const TrainConfig& cfg, int world);

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
