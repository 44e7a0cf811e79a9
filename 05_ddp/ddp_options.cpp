// provides: the class's side of the options of PyTorch's reducer itself (Note [Reducer options]):
// the default ReducerOption, the parts of the class an option works with, set_reducer_option().
// The options are in beyond/: gradient_as_bucket_view.cpp, unused_parameters.cpp.
#include <typeinfo>

#include "05_ddp/ddp.h"
#include "common/basics/errors.h"
#include "common/basics/log.h"

namespace ddp {

// Note [Reducer options]
// ~~~~~~~~~~~~~~~~~~~~~~~
// A communication hook, Join and ZeRO compose onto DDP from outside (going_further/);
// gradient_as_bucket_view and find_unused_parameters cannot: they change what the reducer does
// with each gradient as it arrives (where it is stored; whether a bucket may complete without
// it) and which buckets it builds. PyTorch makes them arguments of DistributedDataParallel's
// constructor, handled inside its C++ reducer (torch/csrc/distributed/c10d/reducer.cpp,
// Reducer::initialize_bucket_views and Reducer::search_unused_parameters, PyTorch 1.13), with
// branches on them in the reducer's own steps. Ours keep the lesson's class free of them: the
// class calls a ReducerOption at five points of its steps (buckets built, backward started, a
// gradient into its bucket, an average back into .grad(), and installed), whose default does
// what the lesson does there; each option is a ReducerOption in beyond/ (Note [Gradients as
// bucket views], Note [Unused parameters]), and deleting one, with its flag, leaves the rest.
// The price: one virtual call per gradient and per parameter of a synchronising backward.

void DistributedDataParallel::ReducerOption::into_bucket(size_t i, torch::Tensor& slot) {
  ddp_.copy_into_bucket(slot, ddp_.params_[i].grad());
}

torch::Tensor DistributedDataParallel::ReducerOption::place_in_bucket(size_t i) const {
  const Bucket& b = ddp_.buckets_[ddp_.bucket_of_[i]];
  return b.flat.narrow(0, b.offsets[ddp_.slot_of_[i]], ddp_.params_[i].numel());
}

void DistributedDataParallel::ReducerOption::copy_into_bucket(torch::Tensor& slot, const torch::Tensor& grad) const {
  ddp_.copy_into_bucket(slot, grad);
}

std::vector<std::vector<size_t>> DistributedDataParallel::ReducerOption::by_size_in_definition_order() const {
  std::vector<size_t> order(ddp_.params_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  return assign_buckets(order, ddp_.bytes_, ddp_.cap_bytes_ == kOneBucket ? kOneBucket : kFirstBucketBytes, ddp_.cap_bytes_);
}

void DistributedDataParallel::ReducerOption::keep_buckets(const std::vector<std::vector<size_t>>& assignment) const {
  ddp_.build_buckets(assignment);
  ddp_.rebuilt_ = true;  // final: no rebuild after the first iteration
}

void DistributedDataParallel::set_reducer_option(std::unique_ptr<ReducerOption> option) {
  before_first_backward(option->name());
  const ReducerOption& current = *option_;
  if (typeid(current) != typeid(ReducerOption)) {
    throw UsageError(std::string(option->name()) + " with " + option_->name() + ": not both in this course (PyTorch allows it)");
  }
  option_ = std::move(option);
  option_->installed();
}

}  // namespace ddp
