// provides: GradientAsBucketView: each .grad() a view into its bucket (--gradient-as-bucket-view).
#include "05_ddp/beyond/gradient_as_bucket_view.h"

namespace ddp {

// Note [Gradients as bucket views]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Without it every gradient is stored twice: autograd accumulates it into .grad(), DDP copies it
// (times 1/world) into the bucket, all-reduces the bucket, and copies the average back into
// .grad(). With gradient_as_bucket_view=True each .grad() is made a view into its place in the
// bucket (PyTorch's reducer: grad = bucket_view), so the all-reduce averages the gradients
// where the optimizer reads them, and one copy of the model's size is gone (4 bytes per float32
// parameter). What PyTorch does, step by step, and so do we:
//   - when the gradient arrives and .grad() is not yet a view of the bucket (the first backward,
//     or .grad() was set to None by zero_grad(): LibTorch 2.x's default, not 1.13's): multiply
//     it into the bucket as usual, then .grad() = the view; the tensor autograd made is freed;
//   - when .grad() already is the view (zero_grad() zeroed it in place, and autograd accumulated
//     into it there): divide it in place, bucket_view.div_(world). Not x * (1/world): x / 3 and
//     x * (1/3) may differ in the last bit (1/3 is rounded to a float first), so at 3 ranks the
//     flag changes the result where PyTorch's changes it;
//   - after a (re)build of the buckets, each .grad() that exists is copied into its new place and
//     pointed at it (PyTorch's initialize_bucket_views);
//   - after the all-reduce nothing is copied back: .grad() is the average already.
// Gradient accumulation under no_sync() accumulates into the view too. A comm hook's result is
// copied into the bucket, and so into every .grad() at once. A reducer option of the class (Note
// [Reducer options]): into_bucket(), buckets_built() and average_into_grad() below.

void GradientAsBucketView::into_bucket(size_t i, torch::Tensor& slot) {
  const torch::Tensor& param = ddp_.parameters()[i];
  torch::Tensor& grad = param.mutable_grad();
  if (grad.is_alias_of(slot)) {
    if (!ddp_.comm_hook()) slot.div_(divisor());  // PyTorch's in-place division
    return;
  }
  copy_into_bucket(slot, grad);
  grad = slot.view_as(param);
}

void GradientAsBucketView::buckets_built() {
  torch::NoGradGuard no_grad;
  const std::vector<torch::Tensor>& params = ddp_.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    torch::Tensor& grad = params[i].mutable_grad();
    if (!grad.defined()) continue;
    torch::Tensor view = place_in_bucket(i).view_as(params[i]);
    if (grad.is_alias_of(view)) continue;
    view.copy_(grad);
    grad = view;
  }
}

}  // namespace ddp
