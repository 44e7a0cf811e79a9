// provides: the data by flag, the learning-rate schedule and the optimizer by flag.
#include "05_ddp/trainer/trainer.h"

#include <torch/version.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "05_ddp/trainer/adamw.h"
#include "05_ddp/trainer/sgd.h"

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
      // LibTorch's AdamW, stepping as Python's of the same version: Note [AdamW as Python steps it].
      return std::make_unique<AdamW>(some, torch::optim::AdamWOptions(o.lr).weight_decay(o.weight_decay));
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

}  // namespace ddp
