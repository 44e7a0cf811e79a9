// provides: AdamW. See Note [AdamW as Python steps it].
#include "05_ddp/trainer/adamw.h"

#include <cmath>

#include "05_ddp/trainer/sgd.h"

namespace ddp {

torch::Tensor AdamW::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss = {};
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups()) {
    auto& o = static_cast<torch::optim::AdamWOptions&>(group.options());
    const double beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas());
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      const torch::Tensor& grad = p.grad();
      auto key = state_key<typename std::decay_t<decltype(state())>::key_type>(p);
      if (o.weight_decay() != 0) p.mul_(1 - o.lr() * o.weight_decay());
      if (state().find(key) == state().end()) {
        auto s = std::make_unique<torch::optim::AdamWParamState>();
        s->step(0);
        s->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        s->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        if (o.amsgrad()) s->max_exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        state()[key] = std::move(s);
      }
      auto& s = static_cast<torch::optim::AdamWParamState&>(*state()[key]);
      torch::Tensor& exp_avg = s.exp_avg();
      torch::Tensor& exp_avg_sq = s.exp_avg_sq();
      s.step(s.step() + 1);
#if TORCH_VERSION_MAJOR >= 2
      exp_avg.lerp_(grad, 1 - beta1);
#else
      exp_avg.mul_(beta1).add_(grad, 1 - beta1);
#endif
      exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2);
      const double step = static_cast<double>(s.step());
      const double bias_correction1 = 1 - std::pow(beta1, step), bias_correction2 = 1 - std::pow(beta2, step);
      const double step_size = o.lr() / bias_correction1;
#if TORCH_VERSION_MAJOR >= 2
      const double root = std::pow(bias_correction2, 0.5);
#else
      const double root = std::sqrt(bias_correction2);
#endif
      torch::Tensor denom;
      if (o.amsgrad()) {
        torch::Tensor& max_sq = s.max_exp_avg_sq();
        torch::maximum_out(max_sq, max_sq, exp_avg_sq);
        denom = (max_sq.sqrt() / root).add_(o.eps());
      } else {
        denom = (exp_avg_sq.sqrt() / root).add_(o.eps());
      }
      p.addcdiv_(exp_avg, denom, -step_size);
    }
  }
  return loss;
}

}  // namespace ddp
