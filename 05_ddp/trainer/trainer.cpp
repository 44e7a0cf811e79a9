// provides: the optimizer by flag, and the --nproc-per-node relaunch through 02_spawn.
#include "05_ddp/trainer/trainer.h"

#include <torch/version.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "05_ddp/trainer/sgd.h"
#include "common/basics/errors.h"
#include "common/basics/paths.h"

namespace ddp {

std::pair<Dataset, Dataset> load_datasets(const TrainerOptions& o) {
  if (!o.synthetic) return {load_fashion_mnist(o.data_dir, true, o.train_samples), load_fashion_mnist(o.data_dir, false, o.test_samples)};
  Dataset train = synthetic_dataset(o.train_samples.value_or(60000), true);
  Dataset test = synthetic_dataset(o.test_samples.value_or(10000), false);
  if (o.train_samples) train = first_n(train, *o.train_samples);
  if (o.test_samples) test = first_n(test, *o.test_samples);
  return {std::move(train), std::move(test)};
}

double learning_rate(const TrainerOptions& o, int64_t step, int64_t total) {
  if (step < o.warmup_steps) return o.lr * static_cast<double>(step + 1) / o.warmup_steps;
  const double progress = static_cast<double>(step - o.warmup_steps) / std::max<int64_t>(1, total - o.warmup_steps);
  return o.lr * 0.5 * (1 + std::cos(M_PI * progress));
}

OptimizerFactory optimizer_factory(const TrainerOptions& o) {
  return [o](const std::vector<torch::Tensor>& some) -> std::unique_ptr<torch::optim::Optimizer> {
    if (o.optimizer == "adamw") {
      return std::make_unique<torch::optim::AdamW>(some, torch::optim::AdamWOptions(o.lr).weight_decay(o.weight_decay));
    }
    // LibTorch's SGD, stepping every parameter in one launch: Note [One launch for all parameters].
    return std::make_unique<ForeachSgd>(some, torch::optim::SGDOptions(o.lr).momentum(o.momentum).weight_decay(o.weight_decay));
  };
}

void zero_grad(torch::optim::Optimizer& optimizer) {
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) {
      torch::Tensor& grad = p.mutable_grad();
      if (!grad.defined()) continue;
#if TORCH_VERSION_MAJOR >= 2
      grad.reset();  // set_to_none=True, the default since 2.0
#else
      if (grad.grad_fn()) grad.detach_();
      else grad.requires_grad_(false);
      grad.zero_();
#endif
    }
  }
}

int64_t count_parameters(const std::vector<torch::Tensor>& params) {
  int64_t n = 0;
  for (const auto& p : params) n += p.numel();
  return n;
}

int relaunch_with_02_spawn(int argc, char** argv, int nproc, const CommonFlags& flags, const TrainerOptions& o) {
  if (flags.rank) throw UsageError("--nproc-per-node starts the ranks itself: drop --rank");
  if (flags.world_size && *flags.world_size != nproc) {
    throw UsageError("--world-size " + std::to_string(*flags.world_size) + " differs from --nproc-per-node " +
                     std::to_string(nproc) + " (one machine: they are the same)");
  }
  const std::string self = this_program(), launcher = program_beside("02_spawn");
  if (::access(launcher.c_str(), X_OK) != 0) {
    throw UsageError("--nproc-per-node needs chapter 02's launcher at " + launcher +
                     " (build it), or start each rank yourself with --rank/--world-size");
  }
  std::vector<std::string> args{launcher, "--nproc-per-node", std::to_string(nproc)};
  if (flags.timeout_s) args.insert(args.end(), {"--timeout", std::to_string(*flags.timeout_s)});
  if (flags.master_addr) args.insert(args.end(), {"--master-addr", *flags.master_addr});
  if (flags.master_port) args.insert(args.end(), {"--master-port", std::to_string(*flags.master_port)});
  if (!o.on_failure.empty()) args.insert(args.end(), {"--on-failure", o.on_failure});
  if (o.max_restarts) args.insert(args.end(), {"--max-restarts", std::to_string(*o.max_restarts)});
  args.insert(args.end(), {"--", self});
  for (int i = 1; i < argc; ++i) {  // the same flags, minus --nproc-per-node
    const std::string a = argv[i];
    if (a == "--nproc-per-node") {
      ++i;
      continue;
    }
    if (a.rfind("--nproc-per-node=", 0) == 0) continue;
    args.push_back(a);
  }
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  std::fflush(nullptr);
  ::execv(launcher.c_str(), cargs.data());
  throw std::runtime_error("cannot start " + launcher + ": " + std::strerror(errno));
}

}  // namespace ddp
