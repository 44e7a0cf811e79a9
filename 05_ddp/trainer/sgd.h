// defines: ForeachSgd, LibTorch's SGD stepping all parameters at once (Note [One launch for all parameters]), and state_key().
#pragma once
#include <torch/torch.h>

#include <sstream>
#include <string>
#include <type_traits>

namespace ddp {

// The key of `p`'s entry in an optimizer's state(): LibTorch keys it by the tensor's
// implementation, its address printed as a string in 1.13, the address itself in 2.x.
template <class Key>
Key state_key(const torch::Tensor& p) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream key;  // what 1.13's c10::guts::to_string does
    key << p.unsafeGetTensorImpl();
    return key.str();
  } else {
    return p.unsafeGetTensorImpl();
  }
}

// Note [One launch for all parameters]
// LibTorch's C++ SGD updates one parameter at a time: three small kernels per tensor (momentum,
// its sum, the update). On a GPU each is a launch that costs the host a few microseconds while
// the GPU does nanoseconds of work, and for a small model the launches are the step. PyTorch's
// Python SGD has used "foreach" kernels on GPUs since 2.0: one launch updates a whole list of
// tensors. ForeachSgd is LibTorch's SGD with that step: the same options, the same state (so
// checkpoints are unchanged), the same arithmetic in the same order (Python's _multi_tensor_sgd),
// and on the CPU, where foreach kernels loop over the tensors, the same results bit for bit.
class ForeachSgd : public torch::optim::SGD {
 public:
  using torch::optim::SGD::SGD;
  torch::Tensor step(LossClosure closure = nullptr) override;
};

}  // namespace ddp
