// provides: ForeachSgd::step, torch.optim.SGD's _multi_tensor_sgd in C++.
#include "05_ddp/trainer/sgd.h"

#include <algorithm>
#include <type_traits>

namespace ddp {
torch::Tensor ForeachSgd::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  using Key = typename std::decay_t<decltype(state_)>::key_type;
  for (auto& group : param_groups_) {
    const auto& o = static_cast<const torch::optim::SGDOptions&>(group.options());
    std::vector<torch::Tensor> params, grads;
    for (auto& p : group.params()) {
      if (p.grad().defined()) params.push_back(p), grads.push_back(p.grad());
    }
    if (params.empty()) continue;
    if (o.weight_decay() != 0) grads = at::_foreach_add(grads, params, o.weight_decay());
    if (o.momentum() != 0) {
      std::vector<torch::Tensor> bufs;
      std::vector<bool> fresh;  // a buffer made this step, from the gradient itself (LibTorch's SGD)
      for (size_t k = 0; k < params.size(); ++k) {
        const Key key = state_key<Key>(params[k]);
        auto it = state_.find(key);
        fresh.push_back(it == state_.end());
        if (!fresh.back()) {
          bufs.push_back(static_cast<torch::optim::SGDParamState&>(*it->second).momentum_buffer());
          continue;
        }
        auto state = std::make_unique<torch::optim::SGDParamState>();
        state->momentum_buffer(torch::clone(grads[k]).detach());
        bufs.push_back(state->momentum_buffer());
        state_[key] = std::move(state);
      }
      if (std::find(fresh.begin(), fresh.end(), true) == fresh.end()) {
        at::_foreach_mul_(bufs, o.momentum());
        at::_foreach_add_(bufs, grads, 1 - o.dampening());
      } else {  // the first step (or a parameter's first gradient): one tensor at a time, as Python does
        for (size_t k = 0; k < bufs.size(); ++k) {
          if (!fresh[k]) bufs[k].mul_(o.momentum()).add_(grads[k], 1 - o.dampening());
        }
      }
      if (o.nesterov()) {
        grads = at::_foreach_add(grads, bufs, o.momentum());
      } else {
        grads = bufs;
      }
    }
    at::_foreach_add_(params, grads, -1 * o.lr());
  }
  return loss;
}

}  // namespace ddp
