// provides: DistributedDataParallel's extensions, beyond the lesson of ddp.cpp: communication
// hooks, the overlap share, buckets restored from a checkpoint, BatchNorm's buffers, the
// --skip-rank fault, and the bucket report of the log.
#include <torch/version.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <unordered_set>

#include "05_ddp/ddp.h"
#include "common/basics/errors.h"
#include "common/basics/log.h"
#include "common/observe/trace.h"

namespace ddp {

// Note [Communication hooks]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A hook decides what a bucket's all-reduce sends. PyTorch's fp16_compress_hook: cast the
// bucket to float16, divide it by the world size there, all-reduce that, and copy the result
// back into the float32 bucket; bf16_compress_hook the same with bfloat16. Half the bytes on the
// wire, for gradients rounded to 11 (fp16) or 8 (bf16) significant bits on the way. With a hook
// the gradients are copied into the bucket as they are: the hook divides, after the cast, so
// that the sum of world-many fp16 values stays in range. Done in this order, our result is
// bit-identical to PyTorch's DDP with the same hook (tests/test_trainer.cpp). On a slow link the
// halved bytes are what a step saves; on loopback the casts may cost more than they save.
//
// Note [Overlap share]
// For each synchronising backward: the time some bucket's all-reduce was in flight (the union
// of [start, end] over the buckets: Gloo may run two at once), and the part of it before
// finish_backward(), that is, while autograd was still computing gradients. Their ratio, over
// every backward but the first (it rebuilds the buckets), is the share of communication hidden
// behind backward. The end of an all-reduce is when the backend completed it (a callback on
// its future, common/observe/flight_recorder.cpp), not when we waited for it.
//
// Note [Buffers]
// A buffer is module state that is not a parameter: BatchNorm's running mean and variance
// (and its batch counter). No gradient, so no all-reduce: each rank's forward updates its own
// copy from its own batch, and the ranks' copies drift apart. PyTorch's DDP keeps one truth:
// rank 0's buffers are broadcast to all ranks before every forward (broadcast_buffers=True),
// one flat broadcast per dtype. The statistics used in training are still each rank's own
// batch's; the running ones, used to evaluate, are rank 0's everywhere, so a distributed
// validation evaluates one model, the one rank 0 checkpoints. SyncBatchNorm is the other
// answer: statistics over all ranks' batches.

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
//     into it there): divide it in place, bucket_view.div_(world). Not x * (1/world): at a world
//     size that is not a power of two, x / 3 and x * (1/3) may differ in the last bit, so at 3
//     ranks the flag changes the result where PyTorch's changes it, and at 1, 2, 4 ranks not;
//   - after a (re)build of the buckets, each .grad() that exists is copied into its new place and
//     pointed at it (PyTorch's initialize_bucket_views);
//   - after the all-reduce nothing is copied back: .grad() is the average already.
// Gradient accumulation under no_sync() accumulates into the view too. A comm hook's result is
// copied into the bucket, and so into every .grad() at once.

void DistributedDataParallel::set_gradient_as_bucket_view(bool on) {
  if (rebuilt_ || in_backward_) throw UsageError("gradient_as_bucket_view: set it before the first backward, as PyTorch's constructor does");
  as_bucket_view_ = on;
  if (on) point_gradients_at_buckets();
}

void DistributedDataParallel::gradient_into_view(size_t i, torch::Tensor& view) {
  torch::Tensor& grad = params_[i].mutable_grad();
  if (grad.is_alias_of(view)) {
    if (hook_ == CommHook::kNone) view.div_(divisor_);  // PyTorch's in-place division
    return;
  }
  copy_into_bucket(view, grad);
  grad = view.view_as(params_[i]);
}

void DistributedDataParallel::point_gradients_at_buckets() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    torch::Tensor& grad = params_[i].mutable_grad();
    if (!grad.defined()) continue;
    const Bucket& b = buckets_[bucket_of_[i]];
    torch::Tensor view = b.flat.narrow(0, b.offsets[slot_of_[i]], params_[i].numel()).view_as(params_[i]);
    if (grad.is_alias_of(view)) continue;
    view.copy_(grad);
    grad = view;
  }
}

DistributedDataParallel::GradientBytes DistributedDataParallel::gradient_bytes() const {
  GradientBytes g;
  for (const auto& b : buckets_) g.buckets += b.flat.numel() * b.flat.element_size();
  for (const auto& p : params_) {
    const torch::Tensor& grad = p.grad();
    if (!grad.defined()) continue;
    bool in_a_bucket = false;
    for (const auto& b : buckets_) in_a_bucket = in_a_bucket || grad.is_alias_of(b.flat);
    if (!in_a_bucket) g.grads_apart += grad.numel() * grad.element_size();
  }
  return g;
}

// Note [Unused parameters]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// A forward that skips a branch (--model mlp_branch skips its aux head on some batches) leaves
// that branch's parameters without a gradient: their hooks never fire, their bucket never
// completes, and DDP stops with the error that names them (finish_backward; PyTorch: "Expected
// to have finished reduction in the prior iteration"). PyTorch's find_unused_parameters=True,
// and ours (--find-unused-parameters):
//   - after each forward that will synchronise, walk the autograd graph back from the output
//     (prepare_for_backward) and list the parameters whose gradient accumulator it does not
//     reach: a walk over every node of the graph, every step, the price of the flag;
//   - when backward starts, mark those ready at once: their bucket slot gets their .grad() as it
//     is, times 1/world (LibTorch 1.13's zero_grad() leaves zeros there, 2.x's None: then zeros);
//   - a bitmap of the parameters whose hook fired on this rank is summed over the ranks (one more
//     all-reduce per step, of 4 bytes per parameter); a parameter no rank used keeps its .grad()
//     untouched, one that some rank used gets the bucket's value: the sum of the ranks that used
//     it divided by the world size (not by how many used it: PyTorch's averaging, kept for parity);
//   - the buckets are cut by size in definition order once and never rebuilt (PyTorch's
//     distributed.py: the rebuild needs a graph that does not change).
// Under no_sync() nothing is walked and no usage is recorded, as in PyTorch: the step's last
// micro-batch alone decides which parameters count as used.

void DistributedDataParallel::set_find_unused_parameters(bool on) {
  if (rebuilt_ || in_backward_) throw UsageError("find_unused_parameters: set it before the first backward, as PyTorch's constructor does");
  if (!on) return;
  if (as_bucket_view_) throw UsageError("--find-unused-parameters with --gradient-as-bucket-view: not both in this course (PyTorch allows it)");
  unused_.on = true;
  unused_.here.assign(params_.size(), 0);
  unused_.everywhere.assign(params_.size(), 0);
  // PyTorch's buckets for this case: by size in definition order (1 MiB, then the cap), the
  // list reversed so that the last layers' bucket comes first; never rebuilt.
  std::vector<size_t> order(params_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  auto assignment = assign_buckets(order, bytes_, cap_bytes_ == kOneBucket ? kOneBucket : kFirstBucketBytes, cap_bytes_);
  std::reverse(assignment.begin(), assignment.end());
  build_buckets(assignment);
  rebuilt_ = true;  // final: no rebuild after the first iteration
  log0("buckets cut by size in definition order, never rebuilt (--find-unused-parameters): " + describe_buckets());
}

void DistributedDataParallel::prepare_for_backward(const torch::Tensor& output) {
  if (!unused_.on || !sync_ || !torch::GradMode::is_enabled() || !output.requires_grad()) return;
  const double start = wall_us();
  std::unordered_set<const torch::autograd::Node*> seen;
  std::vector<const torch::autograd::Node*> stack{output.grad_fn().get()};
  while (!stack.empty()) {
    const torch::autograd::Node* node = stack.back();
    stack.pop_back();
    if (!node || !seen.insert(node).second) continue;
    for (const auto& edge : node->next_edges()) stack.push_back(edge.function.get());
  }
  unused_.now.clear();
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!seen.count(accumulators_[i].get())) unused_.now.push_back(i), ++unused_.here[i];
  }
  ++unused_.walks, unused_.nodes += static_cast<int64_t>(seen.size()), unused_.walk_us += wall_us() - start;
}

void DistributedDataParallel::mark_unused_ready() {
  unused_.summed = false;
  for (size_t i : unused_.now) {
    Bucket& b = buckets_[bucket_of_[i]];
    torch::Tensor view = b.flat.narrow(0, b.offsets[slot_of_[i]], params_[i].numel());
    const torch::Tensor& grad = params_[i].grad();
    if (grad.defined()) copy_into_bucket(view, grad);
    else view.zero_();
    --b.pending;
  }
  unused_.now.clear();
  launch_ready_buckets();
}

bool DistributedDataParallel::unused_everywhere(size_t i) {
  if (!unused_.summed) {  // once per backward, on every rank at the same point of finish_backward
    std::vector<torch::Tensor> used{torch::zeros({static_cast<int64_t>(params_.size())}, torch::kInt32)};
    for (size_t j : ready_order_) used[0][static_cast<int64_t>(j)] = 1;
    used[0] = used[0].to(params_[0].device());
    run(group_, "all-reduce", "unused-parameters", used[0].numel() * 4, [&] { return group_.pg->allreduce(used); });
    unused_.used = used[0].cpu();
    unused_.summed = true;
    for (size_t j = 0; j < params_.size(); ++j) unused_.everywhere[j] += unused_.used[static_cast<int64_t>(j)].item<int>() == 0;
  }
  return unused_.used[static_cast<int64_t>(i)].item<int>() == 0;
}

std::string DistributedDataParallel::describe_unused() const {
  if (!unused_.on) return "";
  char cost[160];
  std::snprintf(cost, sizeof(cost), "graph walked %lld times, %.0f nodes and %.1f us per walk",
                static_cast<long long>(unused_.walks), unused_.walks ? static_cast<double>(unused_.nodes) / unused_.walks : 0.0,
                unused_.walks ? unused_.walk_us / unused_.walks : 0.0);
  std::string s = std::string("--find-unused-parameters: ") + cost;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (unused_.here[i] || unused_.everywhere[i]) {
      s += "; " + names_[i] + " unused here in " + std::to_string(unused_.here[i]) + " step(s), on every rank in " +
           std::to_string(unused_.everywhere[i]);
    }
  }
  return s;
}

CommHook parse_comm_hook(const std::string& name) {
  if (name == "none") return CommHook::kNone;
  if (name == "fp16") return CommHook::kFp16;
  if (name == "bf16") return CommHook::kBf16;
  if (name == "powersgd") return CommHook::kPowerSgd;
  throw UsageError("--comm-hook " + name + ": use none, fp16, bf16 or powersgd");
}

void DistributedDataParallel::register_comm_hook(CommHook hook, const PowerSgdOptions& powersgd) {
  if (rebuilt_ || in_backward_) throw UsageError("register_comm_hook: call it before the first backward, as in PyTorch");
#if TORCH_VERSION_MAJOR < 2
  // LibTorch 1.13's Gloo has no bfloat16 sum ("Invalid scalar type"); PyTorch 1.13's DDP refuses
  // bf16_compress_hook without CUDA 11+ and NCCL 2.10+. NCCL has it, and so has 2.x's Gloo.
  if (hook == CommHook::kBf16 && group_.pg->getBackendName() == "gloo") {
    throw UsageError("--comm-hook bf16: the Gloo of LibTorch 1.13"
                     " cannot all-reduce bfloat16 (PyTorch 1.13 refuses bf16_compress_hook without CUDA and NCCL too); use "
                     "--comm-hook fp16, NCCL, or LibTorch 2.x");
  }
#endif
  hook_ = hook;
  powersgd_.reset();
  if (hook == CommHook::kPowerSgd) powersgd_ = std::make_unique<PowerSgd>(group_, powersgd, params_);
}

std::vector<torch::Tensor> DistributedDataParallel::gradient_views(const Bucket& b) const {
  std::vector<torch::Tensor> views;
  for (size_t k = 0; k < b.params.size(); ++k) {
    const torch::Tensor& p = params_[b.params[k]];
    views.push_back(b.flat.narrow(0, b.offsets[k], p.numel()).view(p.sizes()));
  }
  return views;
}

torch::Tensor DistributedDataParallel::to_wire(Bucket& b) {
  if (hook_ == CommHook::kNone || hook_ == CommHook::kPowerSgd) return b.flat;  // PowerSGD: its own collectives
  // Compress, then divide in the compressed type (Note [Communication hooks]).
  b.wire = b.flat.to(hook_ == CommHook::kFp16 ? torch::kHalf : torch::kBFloat16).div_(group_.size());
  return b.wire;
}

bool DistributedDataParallel::skipped_by_fault_injection(Bucket& b, const std::string& tag) {
  if (!skip_next_ || &b != &buckets_.front()) return false;
  skip_next_ = false, b.skipped = true;
  log("fault injection (--skip-rank): not starting the all-reduce of " + tag);
  return true;
}

void DistributedDataParallel::account_overlap(double computed_us) {
  std::vector<std::pair<double, double>> spans;
  for (const auto& b : buckets_) {
    if (b.skipped) continue;
    const double end = b.work.done_us->load();
    spans.emplace_back(b.work.issued_us, end > 0 ? end : wall_us());
  }
  std::sort(spans.begin(), spans.end());
  double comm = 0, hidden = 0, from = 0, to = -1;  // the union, one merged interval at a time
  auto close = [&] {
    if (to <= from) return;
    comm += to - from;
    hidden += std::max(0.0, std::min(to, computed_us) - from);
  };
  for (const auto& [s, e] : spans) {
    if (s > to) close(), from = s, to = e;
    else to = std::max(to, e);
  }
  close();
  if (rebuilt_) overlap_.comm_us += comm, overlap_.hidden_us += hidden, ++overlap_.backwards;  // not the first
}

void DistributedDataParallel::set_gradient_divisor(int n) {
  divisor_ = n;
  inverse_world_ = torch::scalar_tensor(1.0 / n, torch::kDouble);
  inverse_world_.unsafeGetTensorImpl()->set_wrapped_number(true);
}

void DistributedDataParallel::shadow_backward() {
  for (size_t k = 0; k < buckets_.size(); ++k) {
    const Bucket& b = buckets_[k];
    const auto type = hook_ == CommHook::kFp16 ? torch::kHalf : hook_ == CommHook::kBf16 ? torch::kBFloat16 : b.flat.scalar_type();
    std::vector<torch::Tensor> zeros{torch::zeros({b.flat.numel()}, b.flat.options().dtype(type))};
    run(group_, "all-reduce", "bucket" + std::to_string(k) + " (Join: zeros)", zeros[0].numel() * zeros[0].element_size(),
        [&] { return group_.pg->allreduce(zeros); });
  }
}

void DistributedDataParallel::sync_module_from(int src) {
  broadcast_from_rank0(module_state(), "final model from rank " + std::to_string(src) + " (Join)", src);
}

void DistributedDataParallel::sync_buffers() {
  if (group_.size() > 1) broadcast_from_rank0(module_->buffers(), "buffers");
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
  return s + "; a bucket closes once it holds 1 MiB (the first) or " + cap + " MiB (--bucket-cap-mb)";
}

}  // namespace ddp
