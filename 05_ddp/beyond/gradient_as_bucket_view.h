// defines: GradientAsBucketView, PyTorch's gradient_as_bucket_view=True as a reducer option of the
// DDP class (--gradient-as-bucket-view; going_further/gradient_as_bucket_view.md).
#pragma once
#include "05_ddp/ddp.h"

namespace ddp {

// Each .grad() a view into its place in its bucket: Note [Gradients as bucket views].
class GradientAsBucketView : public DistributedDataParallel::ReducerOption {
 public:
  using ReducerOption::ReducerOption;
  const char* name() const override { return "gradient_as_bucket_view"; }
  void buckets_built() override;  // each .grad() that exists copied into its place and pointed at it
  void into_bucket(size_t i, torch::Tensor& slot) override;
  bool average_into_grad(size_t) override { return false; }  // .grad() is a view into `flat`: already there
};

}  // namespace ddp
