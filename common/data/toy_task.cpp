// provides: the toy task shared by chapters 03-04 and their tests.
#include "common/data/toy_task.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "common/basics/cli.h"
#include "common/basics/errors.h"
#include "common/basics/failure.h"
#include "common/basics/log.h"

namespace ddp::toy {

torch::nn::Sequential make_model(uint64_t seed) {
  torch::manual_seed(seed);
  // One layer per statement: the order of construction decides which random numbers each gets.
  auto first = torch::nn::Linear(kFeatures, kHidden);
  auto second = torch::nn::Linear(kHidden, 1);
  return torch::nn::Sequential(first, torch::nn::Tanh(), second);
}

std::pair<torch::Tensor, torch::Tensor> batch(int step, int rank, int per_rank, int world, const torch::Device& device) {
  auto x = torch::empty({per_rank, kFeatures}, torch::kFloat32);
  auto y = torch::empty({per_rank, 1}, torch::kFloat32);
  auto xa = x.accessor<float, 2>();
  auto ya = y.accessor<float, 2>();
  for (int i = 0; i < per_rank; ++i) {
    const long long g = static_cast<long long>(step) * world * per_rank + static_cast<long long>(rank) * per_rank + i;
    double target = 0, row[kFeatures];
    for (int j = 0; j < kFeatures; ++j) {
      row[j] = static_cast<double>((g * 7 + j * 13) % 17 - 8) / 8.0;
      xa[i][j] = static_cast<float>(row[j]);
      target += row[j] * ((j % 3) - 1) * 0.5;
    }
    target += 0.25 * row[0] * row[1];  // a little non-linearity for the hidden layer to learn
    ya[i][0] = static_cast<float>(target);
  }
  return {x.to(device), y.to(device)};
}

void add_train_flags(CLI::App& app, TrainFlags& f) {
  app.add_option("--steps", f.cfg.steps, "Training steps")->check(CLI::PositiveNumber);
  app.add_option("--lr", f.cfg.lr, "Learning rate")->check(finite_number())->check(CLI::PositiveNumber);
  app.add_option("--batch", f.cfg.batch, "Samples per rank per step")->check(CLI::PositiveNumber);
  app.add_option("--seed", f.cfg.seed, "Seed of the initial weights, the same on every rank");
  app.add_option("--save-init", f.save_init, "Rank 0 writes the initial parameters here (torch::pickle_save)");
  app.add_option("--save-params", f.save_params, "Rank 0 writes the final parameters here (torch::pickle_save)");
  app.add_option("--trace", f.trace, "Write a Chrome/Perfetto timeline: <stem>.rank<r>.json per rank, merged by rank 0 into this file");
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::vector<torch::Tensor>& params, const TrainConfig& cfg) {
  if (cfg.optimizer == "adam") return std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(cfg.lr));
  return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(cfg.lr).momentum(cfg.momentum));
}

std::vector<torch::Tensor> train_single_process(const TrainConfig& cfg, int world, const torch::Device& device) {
  auto model = make_model(cfg.seed);
  model->to(device);
  auto opt = make_optimizer(model->parameters(), cfg);
  for (int step = 0; step < cfg.steps; ++step) {
    auto [x, y] = batch(step, 0, cfg.batch * world, 1, device);  // the whole global batch at once
    opt->zero_grad();
    torch::mse_loss(model->forward(x), y).backward();
    opt->step();
  }
  std::vector<torch::Tensor> out;
  for (auto& p : model->parameters()) out.push_back(p.detach().clone());
  return out;
}

double max_abs_diff(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, (a[i] - b[i]).abs().max().item<double>());
  return m;
}

bool replicas_identical(Group& g, const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> flat;
  for (auto& p : params) flat.push_back(p.detach().reshape(-1));
  std::vector<torch::Tensor> hi{torch::cat(flat)}, lo{hi[0].clone()};
  c10d::AllreduceOptions max_op, min_op;
  max_op.reduceOp = c10d::ReduceOp::MAX;
  min_op.reduceOp = c10d::ReduceOp::MIN;
  g.pg->allreduce(hi, max_op)->wait();
  g.pg->allreduce(lo, min_op)->wait();
  return torch::equal(hi[0], lo[0]);
}

std::string fingerprint(const std::vector<torch::Tensor>& params) {
  uint64_t h = 1469598103934665603ull;
  for (auto& p : params) {
    auto c = p.detach().contiguous().cpu();
    auto* bytes = static_cast<const unsigned char*>(c.data_ptr());
    for (size_t k = 0; k < c.nbytes(); ++k) h = (h ^ bytes[k]) * 1099511628211ull;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

void save_params(const std::vector<torch::Tensor>& params, const std::string& path) {
  c10::List<torch::Tensor> list;
  for (auto& p : params) list.push_back(p.detach().cpu());
  const std::vector<char> bytes = torch::pickle_save(c10::IValue(list));
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) throw UsageError("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw UsageError("cannot rename " + tmp + " to " + path);
}

void LossLog::add(int step, const torch::Tensor& loss) {
  std::vector<torch::Tensor> l{loss.detach().clone()};
  group_.pg->allreduce(l)->wait();
  const double mean = l[0].item<double>() / group_.size();
  if (step == 0) first = mean;
  last = mean;
  if (step == 0 || step == steps_ - 1 || (step + 1) % 5 == 0) {
    char line[96];
    // Steps count from 1 in every log line of the course (05's progress, checkpoints, faults).
    std::snprintf(line, sizeof(line), "step %d: loss %.4f (mean over ranks)", step + 1, mean);
    log0(line);
  }
}

void check_training(Group& group, const std::vector<torch::Tensor>& params, const TrainConfig& cfg, const LossLog& loss,
                    const std::string& save_path) {
  const bool same = replicas_identical(group, params);
  log(std::string("check: every rank holds the same parameters: ") + (same ? "OK" : "FAILED"));
  const double diff = max_abs_diff(params, train_single_process(cfg, group.size(), device_for(group.info)));
  char line[160];
  std::snprintf(line, sizeof(line), "check: single process on the global batch: max |diff| = %.3g <= %.0e: %s", diff,
                kTolerance, diff <= kTolerance ? "OK" : "FAILED");
  log(line);
  std::snprintf(line, sizeof(line), "check: the loss went down: %.4f -> %.4f: %s", loss.first, loss.last,
                loss.last < loss.first ? "OK" : "FAILED");
  log(line);
  log("params fingerprint " + fingerprint(params) + " (bit-identical runs print the same)");
  if (group.rank() == 0 && !save_path.empty()) save_params(params, save_path);
  DDP_CHECK(same, "the ranks' parameters differ");
  DDP_CHECK(diff <= kTolerance, "parameters differ from the single-process run by " << diff);
  DDP_CHECK(loss.last < loss.first, "the loss did not go down");
}

}  // namespace ddp::toy
