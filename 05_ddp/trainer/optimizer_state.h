// defines: one parameter's optimizer state as tensors and back (SGD's momentum buffer, AdamW's
// moments and step), for the optimizers whose state is spread over the ranks: --zero's
// (beyond/zero.cpp), which gathers it, and chapter 07's, which cuts it again at another world size.
#pragma once
#include <torch/torch.h>

#include <memory>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "05_ddp/trainer/sgd.h"

namespace ddp {

inline bool is_adamw(const torch::optim::Optimizer& opt) {
  return dynamic_cast<const torch::optim::AdamWOptions*>(&opt.defaults()) != nullptr;
}

// How many tensors one parameter's state holds: SGD's momentum buffer; AdamW's two moments
// (three with amsgrad). AdamW's step count is a number, kept apart.
inline int tensors_per_state(const torch::optim::Optimizer& opt) {
  if (auto* adamw = dynamic_cast<const torch::optim::AdamWOptions*>(&opt.defaults())) return adamw->amsgrad() ? 3 : 2;
  if (dynamic_cast<const torch::optim::SGDOptions*>(&opt.defaults())) return 1;
  throw std::logic_error("a sharded optimizer state supports SGD and AdamW");
}

inline std::vector<torch::Tensor> state_tensors(const torch::optim::OptimizerParamState& s) {
  if (auto* sgd = dynamic_cast<const torch::optim::SGDParamState*>(&s)) return {sgd->momentum_buffer()};
  if (auto* adamw = dynamic_cast<const torch::optim::AdamWParamState*>(&s)) {
    std::vector<torch::Tensor> t{adamw->exp_avg(), adamw->exp_avg_sq()};
    if (adamw->max_exp_avg_sq().defined()) t.push_back(adamw->max_exp_avg_sq());
    return t;
  }
  throw std::logic_error("a sharded optimizer state supports SGD and AdamW");
}

inline int64_t state_step(const torch::optim::OptimizerParamState& s) {
  auto* adamw = dynamic_cast<const torch::optim::AdamWParamState*>(&s);
  return adamw ? adamw->step() : 0;
}

inline std::unique_ptr<torch::optim::OptimizerParamState> make_state(const torch::optim::Optimizer& opt,
                                                                     const std::vector<torch::Tensor>& t, int64_t step) {
  if (is_adamw(opt)) {
    auto s = std::make_unique<torch::optim::AdamWParamState>();
    s->step(step).exp_avg(t[0]).exp_avg_sq(t[1]);
    if (t.size() > 2) s->max_exp_avg_sq(t[2]);
    return s;
  }
  auto s = std::make_unique<torch::optim::SGDParamState>();
  s->momentum_buffer(t[0]);
  return s;
}

template <class Opt>
auto key_of(const Opt& opt, const torch::Tensor& p) {
  return state_key<typename std::decay_t<decltype(opt.state())>::key_type>(p);
}

inline const torch::optim::OptimizerParamState* find_state(const torch::optim::Optimizer& opt, const torch::Tensor& p) {
  auto it = opt.state().find(key_of(opt, p));
  return it == opt.state().end() ? nullptr : it->second.get();
}

}  // namespace ddp
