// provides: what composes onto DistributedDataParallel without the class knowing it, as in
// PyTorch: the communication hook, what Join's hook uses, the observers; and the class's smaller
// duties: the flat broadcasts (rank 0's weights, BatchNorm's buffers), buckets restored from a
// checkpoint, the bucket report of the log.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "05_ddp/ddp.h"
#include "common/basics/errors.h"
#include "common/basics/log.h"

namespace ddp {

// Note [Buffers]
// A buffer is module state that is not a parameter: BatchNorm's running mean and variance
// (and its batch counter). No gradient, so no all-reduce: each rank's forward updates its own
// copy from its own batch, and the ranks' copies drift apart. PyTorch's DDP keeps one truth:
// rank 0's buffers are broadcast to all ranks before every forward (broadcast_buffers=True),
// one flat broadcast per dtype. The statistics used in training are still each rank's own
// batch's; the running ones, used to evaluate, are rank 0's everywhere, so a distributed
// validation evaluates one model, the one rank 0 checkpoints. SyncBatchNorm is the other
// answer: statistics over all ranks' batches.
std::vector<torch::Tensor> DistributedDataParallel::module_state() const {
  std::vector<torch::Tensor> state = module_->parameters();
  for (auto& b : module_->buffers()) state.push_back(b);
  return state;
}

void DistributedDataParallel::broadcast_from(const std::vector<torch::Tensor>& tensors, const std::string& tag, int src) {
  torch::NoGradGuard no_grad;
  std::map<c10::ScalarType, std::vector<torch::Tensor>> by_type;  // one flat broadcast per dtype
  for (const auto& t : tensors) by_type[t.scalar_type()].push_back(t);
  for (auto& [type, same_type] : by_type) {
    std::vector<torch::Tensor> pieces;
    for (auto& t : same_type) pieces.push_back(t.detach().reshape(-1));
    std::vector<torch::Tensor> flat{torch::cat(pieces)};
    c10d::BroadcastOptions from;
    from.rootRank = src;
    run(group_, "broadcast", tag, flat[0].numel() * flat[0].element_size(), [&] { return group_.pg->broadcast(flat, from); });
    int64_t at = 0;
    for (auto& t : same_type) t.copy_(flat[0].narrow(0, at, t.numel()).view_as(t)), at += t.numel();
  }
}

void DistributedDataParallel::sync_buffers() {
  if (group_.size() > 1) broadcast_from(module_->buffers(), "buffers");
}

void DistributedDataParallel::before_first_backward(const char* what) const {
  if (backward_seen_ || in_backward_) throw UsageError(std::string(what) + ": before the first backward, as in PyTorch");
}

void DistributedDataParallel::register_comm_hook(CommHook hook) {
  before_first_backward("register_comm_hook");
  hook_ = std::move(hook);
}

GradBucket DistributedDataParallel::grad_bucket(size_t k) const {
  const Bucket& b = buckets_[k];
  GradBucket g{k, k + 1 == buckets_.size(), b.flat, {}, "bucket" + std::to_string(k)};
  for (size_t j = 0; j < b.params.size(); ++j) {
    const torch::Tensor& p = params_[b.params[j]];
    g.gradients.push_back(b.flat.narrow(0, b.offsets[j], p.numel()).view(p.sizes()));
  }
  return g;
}

std::vector<GradBucket> DistributedDataParallel::zeros_like_buckets() const {
  std::vector<GradBucket> zeros;
  for (size_t k = 0; k < buckets_.size(); ++k) {
    const torch::Tensor& flat = buckets_[k].flat;
    zeros.push_back({k, k + 1 == buckets_.size(), torch::zeros({flat.numel()}, flat.options()), {}, "bucket" + std::to_string(k)});
  }
  return zeros;
}

void DistributedDataParallel::set_gradient_divisor(int n) {
  // 1/n as PyTorch passes it to mul_out: a "wrapped number", a scalar that neither promotes the
  // gradient's type nor needs to live on its device.
  divisor_ = n;
  inverse_world_ = torch::scalar_tensor(1.0 / n, torch::kDouble);
  inverse_world_.unsafeGetTensorImpl()->set_wrapped_number(true);
}

void DistributedDataParallel::sync_params_and_buffers(int src) {
  broadcast_from(module_state(), "parameters and buffers from rank " + std::to_string(src), src);
}

std::vector<std::vector<size_t>> DistributedDataParallel::bucket_assignment() const {
  std::vector<std::vector<size_t>> out;
  for (const auto& b : buckets_) out.push_back(b.params);
  return out;
}

void DistributedDataParallel::throw_for_missing_gradients() {
  std::string missing;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (bucket_of_[i] >= next_bucket_ && std::find(ready_order_.begin(), ready_order_.end(), i) == ready_order_.end()) {
      missing += (missing.empty() ? "" : ", ") + names_[i];
    }
  }
  for (size_t k = 0; k < next_bucket_; ++k) {
    if (buckets_[k].reduction.work.work) wait(group_, buckets_[k].reduction.work);  // leave nothing in flight
  }
  throw std::runtime_error("backward ended before every bucket was reduced: no gradient for " +
                           (missing.empty() ? std::string("(a parameter of a later bucket)") : missing) +
                           ". Every parameter must take part in the loss on every rank (PyTorch: "
                           "\"Expected to have finished reduction in the prior iteration\"), or, for a forward that "
                           "skips some on purpose, set find_unused_parameters (05_ddp --find-unused-parameters)");
}

void DistributedDataParallel::restore_buckets(const std::vector<std::vector<size_t>>& assignment) {
  if (cap_bytes_ == kOneBucket) {  // --one-bucket keeps its one bucket, whatever the interrupted run had
    rebuilt_ = true;
    log0("buckets as --one-bucket builds them: " + describe_buckets());
    return;
  }
  std::vector<int> seen(params_.size(), 0);
  for (const auto& bucket : assignment) {
    for (size_t i : bucket) {
      if (i >= params_.size() || seen[i]++) throw UsageError("the checkpoint's bucket layout does not fit this model");
    }
  }
  for (const auto& bucket : bucket_assignment()) {
    for (size_t i : bucket) {
      if (!seen[i]) throw UsageError("the checkpoint's bucket layout does not fit this model: it lacks " + names_[i]);
    }
  }
  build_buckets(assignment);
  rebuilt_ = true;
  log0("buckets restored from the checkpoint (Note [Rebuilding the buckets]): " + describe_buckets());
}

std::string DistributedDataParallel::describe_buckets() const {
  auto size = [](double bytes) {  // MiB, or KiB below a tenth of one
    char s[32];
    if (bytes >= kMiB / 10) std::snprintf(s, sizeof(s), "%.2f MiB", bytes / kMiB);
    else std::snprintf(s, sizeof(s), "%.1f KiB", bytes / 1024);
    return std::string(s);
  };
  std::string s = std::to_string(buckets_.size()) + (buckets_.size() == 1 ? " bucket" : " buckets");
  for (size_t k = 0; k < buckets_.size(); ++k) {
    const Bucket& b = buckets_[k];
    size_t bytes = 0;
    for (size_t i : b.params) bytes += bytes_[i];
    s += (k == 0 ? ": bucket" : ", bucket") + std::to_string(k) + " " + size(bytes) + " (" + std::to_string(b.params.size()) +
         (b.params.size() == 1 ? " tensor, " + names_[b.params.front()]
                               : " tensors, " + names_[b.params.front()] + " to " + names_[b.params.back()]) + ")";
  }
  if (cap_bytes_ == kOneBucket) return s + " (--one-bucket)";
  // The cap as --bucket-cap-mb gave it: the shortest decimal that makes the same bytes.
  char cap[32] = "";
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(cap, sizeof(cap), "%.*g", digits, static_cast<double>(cap_bytes_) / kMiB);
    if (static_cast<size_t>(std::strtod(cap, nullptr) * kMiB) == cap_bytes_) break;
  }
  return s + "; a bucket closes once it holds 1 MiB (the first one filled) or " + cap + " MiB (--bucket-cap-mb)";
}

}  // namespace ddp
