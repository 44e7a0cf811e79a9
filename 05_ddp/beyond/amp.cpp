// provides: Amp. See Note [Mixed precision and DDP].
#include "05_ddp/beyond/amp.h"

#include <memory>
#include <utility>

#include "05_ddp/trainer/sharded_state.h"
#include "common/group/compat.h"
#include "common/basics/errors.h"
#include "common/basics/log.h"

namespace ddp {

Amp::Amp(const std::string& mode, const torch::Device& device)
    : mode_(mode), dtype_(mode == "fp16" ? at::kHalf : at::kBFloat16) {
  if (mode_ == "off") return;
  if (!device.is_cuda()) {
    throw UsageError("--amp " + mode_ + " needs a CUDA GPU (this rank runs on " + device.str() +
                     "): mixed precision here is for GPUs; on CPU train without --amp");
  }
  if (mode_ == "fp16") {
    scale_ = torch::full({1}, 65536.0, torch::TensorOptions().dtype(torch::kFloat32).device(device));
    growth_tracker_ = torch::zeros({1}, torch::TensorOptions().dtype(torch::kInt32).device(device));
  }
}

namespace {

struct Autocast {  // `with torch.autocast("cuda", dtype):`
  explicit Autocast(at::ScalarType dtype) : dtype(dtype) { set_cuda_autocast(true, dtype); }
  ~Autocast() { set_cuda_autocast(false, dtype); }
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;
  at::ScalarType dtype;
};

}  // namespace

void Amp::wrap(LossFn& loss_of) const {
  if (mode_ == "off") return;
  loss_of = [inner = std::move(loss_of), dtype = dtype_, scale = mode_ == "fp16" ? scale_ : torch::Tensor()](
                const torch::Tensor& images, const torch::Tensor& labels) {
    torch::Tensor loss;
    {
      Autocast on(dtype);
      loss = inner(images, labels);
    }
    return scale.defined() ? with_scaled_gradient(loss, scale) : loss;
  };
}

torch::Tensor with_scaled_gradient(const torch::Tensor& loss, const torch::Tensor& scale) {
  // A view of the scale with the loss's shape (it changes in place at a step, after backward).
  loss.register_hook([scale = scale.reshape(loss.sizes())](const torch::Tensor& grad) { return grad * scale; });
  return loss;
}

namespace {

// scaler.step(optimizer); scaler.update(): an optimizer around the one the flags built, which
// checkpoints see through (ShardedState: they save and name the inner one).
class ScaledOptimizer : public torch::optim::Optimizer, public ShardedState {
 public:
  ScaledOptimizer(const std::vector<torch::Tensor>& params, std::unique_ptr<torch::optim::Optimizer> inner, Amp& amp)
      : torch::optim::Optimizer({torch::optim::OptimizerParamGroup(params)}, inner->defaults().clone()),
        inner_(std::move(inner)),
        amp_(amp) {}

  torch::Tensor step(LossClosure closure = nullptr) override {
    // main.cpp sets the learning rate on this optimizer's group: the inner one steps with it.
    inner_->param_groups()[0].set_options(param_groups_[0].options().clone());
    if (amp_.unscale_and_check(param_groups_[0].params())) return inner_->step(closure);
    log0("fp16: inf/NaN gradients at step " + std::to_string(amp_.step()) + ": step skipped, loss scale halved");
    return {};
  }
  void save(torch::serialize::OutputArchive& archive) const override { inner_->save(archive); }
  void load(torch::serialize::InputArchive& archive) override { inner_->load(archive); }
  void consolidate_state_dict(int to) override {
    if (auto* sharded = dynamic_cast<ShardedState*>(inner_.get())) sharded->consolidate_state_dict(to);
  }
  const torch::optim::Optimizer& local() const override {
    auto* sharded = dynamic_cast<const ShardedState*>(inner_.get());
    return sharded ? sharded->local() : *inner_;
  }

 private:
  std::unique_ptr<torch::optim::Optimizer> inner_;
  Amp& amp_;
};

}  // namespace

void Amp::wrap(OptimizerFactory& make_optimizer) {
  if (mode_ != "fp16") return;
  make_optimizer = [make = std::move(make_optimizer), this](const std::vector<torch::Tensor>& params) {
    return std::unique_ptr<torch::optim::Optimizer>(std::make_unique<ScaledOptimizer>(params, make(params), *this));
  };
}

bool Amp::unscale_and_check(const std::vector<torch::Tensor>& params) {
  if (mode_ != "fp16") return true;
  std::vector<torch::Tensor> grads;
  for (const auto& p : params) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  auto found_inf = torch::zeros({1}, scale_.options());
  at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, scale_.reciprocal());
  // Halve at once after an overflow; double after 2000 clean steps (GradScaler's defaults).
  at::_amp_update_scale_(scale_, growth_tracker_, found_inf, 2.0, 0.5, 2000);
  return found_inf.item<float>() == 0;
}

}  // namespace ddp
