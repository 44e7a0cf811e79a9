// provides: PowerSgd, PyTorch's powerSGD_hook for the DDP class (--comm-hook powersgd).
#include "05_ddp/beyond/powersgd.h"

#include <torch/version.h>

#include <algorithm>

#include "common/basics/errors.h"
#include "common/basics/log.h"

namespace ddp {

// Note [PowerSGD]
// ~~~~~~~~~~~~~~~~
// A gradient of shape [n, ...] is a matrix M, n x m (m: the product of the other dimensions).
// PowerSGD (Vogels et al., 2019; PyTorch's powerSGD_hook) sends two thin matrices instead of M:
// P = M Q (n x r), summed over the ranks and orthogonalised, then Q = Mᵀ P (m x r), summed and
// divided by the world size; every rank rebuilds M ≈ P Qᵀ. (n + m)·r floats on the wire instead
// of n·m: 2330 instead of 535,040 for the MLP's three weight matrices at r = 1. Per bucket:
//   - which tensors: r is clamped to min(n, m), and a tensor is compressed only when
//     (n + m)·r·2 < n·m (min_compression_rate 2). A bias is n x 1: never. The rest are
//     all-reduced as they are, side by side in one flat tensor (summed, then divided);
//   - error feedback: what the approximation lost in a step (the bucket before it, minus after
//     it) is added to the bucket's next gradients, so nothing is lost for good, only late. The
//     uncompressed tensors get one too: their local value minus the average;
//   - warm start: each step's Q starts from the last step's, one power-iteration step further;
//     the very first is drawn from N(0, 1) on the CPU with torch.manual_seed(s), s taken from
//     numpy's np.random.RandomState(0).randint(10^9), one draw per bucket: that generator is
//     MT19937 seeded as std::mt19937(0), whose 32-bit words are masked to 30 bits and drawn
//     again above 999,999,999. The same s on every rank: every rank starts from the same Q;
//   - orthogonalisation: Gram-Schmidt column by column at r <= 2, torch.linalg.qr above (both
//     in PyTorch 1.13 and 2.x). The Ps and Qs of a bucket sit side by side grouped by shape,
//     in order of first appearance, as PyTorch's shape_to_tensors lays them out: at 3 ranks
//     Gloo's ring sums an element in an order set by its position (Note [Rebuilding the buckets]);
//   - warm-up: the first start_iter steps are plain all-reduces (divide, then sum: PyTorch's
//     allreduce_hook, x / world, which at 3 ranks may differ from our x * (1/world) in the last
//     bit). PyTorch refuses a start below 2: the buckets are rebuilt after step 1, and the
//     state is kept per bucket index.
// One bucket takes three collectives. launch(), when the bucket is complete and backward still
// runs on earlier layers, adds the error, computes P = M Q, and starts the uncompressed
// tensors' all-reduce and P's: those two overlap backward. finish(), in finish_backward(),
// orthogonalises the summed P, computes Q and all-reduces it, blocking: Q needs P's sum, and
// waiting for it inside a gradient hook would stall autograd (PyTorch chains it in the futures'
// callbacks instead; the sums are the same). Every rank issues, during backward, each bucket's
// uncompressed then P all-reduce in bucket order, then after it the Qs in bucket order.
// The same LibTorch ops in the same order as the Python hook: the result is bit-identical to
// PyTorch's DDP with powerSGD_hook (tests/test_trainer.cpp). Not in checkpoints: a resumed run
// starts PowerSGD's state afresh, warm-up included (PyTorch pickles PowerSGDState).

namespace {

// PyTorch's _orthogonalize on a batch of matrices (b x n x r), in place.
void orthogonalize(const torch::Tensor& matrices) {
  const int64_t cols = matrices.size(2);
  if (cols > 2) {
    torch::Tensor r = torch::empty({matrices.size(0), cols, cols}, matrices.options());
    torch::Tensor q = matrices;
    at::linalg_qr_out(q, r, matrices);  // torch.linalg.qr(matrices, out=(matrices, r))
    return;
  }
  for (int64_t i = 0; i < cols; ++i) {  // Gram-Schmidt, orthogonalization_epsilon = 0
    torch::Tensor col = matrices.narrow(2, i, 1);
#if TORCH_VERSION_MAJOR < 2
    col.div_(at::frobenius_norm(col, {1}, /*keepdim=*/true));  // 1.13's torch.norm(col, dim=1, keepdim=True)
#else
    col.div_(at::linalg_vector_norm(col, 2, {1}, /*keepdim=*/true));  // 2.x's
#endif
    if (i + 1 < cols) {
      torch::Tensor rest = matrices.narrow(2, i + 1, cols - i - 1);
      rest.sub_(at::sum(col * rest, {1}, /*keepdim=*/true) * col);
    }
  }
}

int64_t bytes_of(const torch::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

}  // namespace

PowerSgd::PowerSgd(Group& group, const PowerSgdOptions& o, const std::vector<torch::Tensor>& params)
    : group_(group), o_(o) {
  if (o_.rank < 1) {
    throw UsageError("--powersgd-rank " + std::to_string(o_.rank) + ": the rank of the approximation must be at least 1");
  }
  if (o_.start_iter < 2) {
    throw UsageError("--powersgd-start-iter " + std::to_string(o_.start_iter) +
                     ": must be at least 2, as PyTorch's PowerSGDState requires with error feedback and warm start (DDP "
                     "rebuilds its buckets after step 1, and PowerSGD's state is kept per bucket)");
  }
  // r is clamped to min(n, m) per matrix, so a large rank is no error in PyTorch: it only
  // compresses fewer tensors. A rank that compresses none is plain all-reduce with extra steps.
  int64_t largest = 0;  // the largest rank that still compresses some tensor
  bool any = false;
  for (const auto& p : params) {
    if (p.dim() == 0) continue;
    const int64_t n = p.size(0), m = p.numel() / n;
    for (int64_t r = std::min(n, m); r >= 1; --r) {
      if (static_cast<double>((n + m) * r) * o_.min_compression_rate < static_cast<double>(n * m)) {
        largest = std::max(largest, r);
        break;
      }
    }
    const int64_t r = std::min({n, m, o_.rank});
    any = any || static_cast<double>((n + m) * r) * o_.min_compression_rate < static_cast<double>(n * m);
  }
  if (!any) {
    throw UsageError("--powersgd-rank " + std::to_string(o_.rank) + " compresses no tensor of this model: a tensor of n x m " +
                     "is compressed when (n + m) x rank x 2 < n x m" +
                     (largest > 0 ? "; the largest rank that compresses one here is " + std::to_string(largest)
                                  : "; none qualifies at any rank"));
  }
  if (o_.rank > 2 && !params.empty() && params.front().is_cpu() && !at::hasLAPACK()) {
    throw UsageError("--powersgd-rank " + std::to_string(o_.rank) +
                     ": above 2 PowerSGD orthogonalises with torch.linalg.qr, and this LibTorch was built without LAPACK; "
                     "use --powersgd-rank 1 or 2 (Gram-Schmidt)");
  }
  log0("PowerSGD: approximation rank " + std::to_string(o_.rank) + " (--powersgd-rank), plain all-reduces for the first " +
       std::to_string(o_.start_iter) + " steps (--powersgd-start-iter), error feedback and warm start on (Note [PowerSGD])");
}

int64_t PowerSgd::seed() {
  uint32_t v;
  do v = static_cast<uint32_t>(rng_()) & 0x3FFFFFFFu;  // numpy's masked rejection sampling
  while (v > 999999999u);
  return v;
}

Pending PowerSgd::launch(size_t index, torch::Tensor& flat, const std::vector<torch::Tensor>& grads, const std::string& tag) {
  torch::NoGradGuard no_grad;
  const int64_t world = group_.size();
  BucketState& s = buckets_[index];
  s.compressing = iter_ >= o_.start_iter;
  s.flat = flat, s.tag = tag, s.first_pending = false;
  if (!s.compressing) {  // warm-up: PyTorch's allreduce_hook, divide then sum
    flat.div_(world);
    std::vector<torch::Tensor> t{flat};
    return issue(group_, "all-reduce", tag, bytes_of(flat), [&] { return group_.pg->allreduce(t); });
  }
  // Error feedback: last step's loss added back; a copy of what is to be approximated.
  if (s.error.defined()) flat.add_(s.error);
  else s.error = torch::zeros({flat.numel()}, flat.options());
  s.input = flat.clone();

  // Which tensors to compress: each as shape[0] x rest.
  s.matrices.clear(), s.uncompressed.clear();
  std::vector<std::pair<std::pair<int64_t, int64_t>, std::vector<torch::Tensor>>> by_shape;  // first appearance order
  int64_t ps_size = 0, qs_size = 0;
  for (const auto& g : grads) {
    torch::Tensor matrix = g.view({g.size(0), -1});
    const int64_t n = matrix.size(0), m = matrix.size(1), r = std::min({n, m, o_.rank});
    step_full_bytes_ += bytes_of(g);
    if (static_cast<double>((n + m) * r) * o_.min_compression_rate < static_cast<double>(n * m)) {
      auto it = std::find_if(by_shape.begin(), by_shape.end(), [&](const auto& e) { return e.first == std::make_pair(n, m); });
      if (it == by_shape.end()) by_shape.push_back({{n, m}, {}}), it = std::prev(by_shape.end());
      it->second.push_back(matrix);
      ps_size += n * r, qs_size += m * r;
      ++step_matrices_;
    } else {
      s.uncompressed.push_back(g);
    }
  }
  std::vector<torch::Tensor> pieces;
  for (const auto& t : s.uncompressed) pieces.push_back(t.reshape(-1));
  s.uncompressed_memory = pieces.empty() ? torch::empty({0}, flat.options()) : torch::cat(pieces);

  // P and Q memories, once per bucket (warm start keeps them); then each matrix's views.
  const bool randomize = !s.p_memory.defined();
  if (randomize) {
    s.p_memory = torch::empty({ps_size}, flat.options());
    s.q_memory = torch::empty({qs_size}, flat.options());
  }
  int64_t p_at = 0, q_at = 0;
  for (const auto& [shape, matrices] : by_shape) {
    const int64_t n = shape.first, m = shape.second, r = std::min({n, m, o_.rank});
    for (const auto& matrix : matrices) {
      s.matrices.push_back({matrix, s.p_memory.narrow(0, p_at, n * r).view({1, n, r}), s.q_memory.narrow(0, q_at, m * r).view({1, m, r})});
      p_at += n * r, q_at += m * r;
    }
  }
  if (!randomize) {
    for (auto& x : s.matrices) orthogonalize(x.q);
  } else {  // torch.manual_seed(rng.randint(1e9)) in a forked RNG, then randn on the CPU
    at::Generator gen = at::detail::createCPUGenerator(static_cast<uint64_t>(seed()));
    for (auto& x : s.matrices) {
      x.q.copy_(at::randn(x.q.sizes(), gen, torch::TensorOptions().dtype(flat.dtype())));
      orthogonalize(x.q);
    }
  }
  for (auto& x : s.matrices) at::bmm_out(x.p, x.m.unsqueeze(0), x.q);

  // Two of the bucket's three collectives now, while backward goes on: Note [PowerSGD].
  step_bytes_ += bytes_of(s.uncompressed_memory) + bytes_of(s.p_memory) + bytes_of(s.q_memory);
  step_pq_floats_ += ps_size + qs_size, step_plain_floats_ += s.uncompressed_memory.numel();
  Pending last;
  if (s.uncompressed_memory.numel() > 0) {
    std::vector<torch::Tensor> t{s.uncompressed_memory};
    last = issue(group_, "all-reduce", tag + " uncompressed", bytes_of(s.uncompressed_memory), [&] { return group_.pg->allreduce(t); });
  }
  if (s.p_memory.numel() > 0) {
    if (last.work) s.first = last, s.first_pending = true;
    std::vector<torch::Tensor> t{s.p_memory};
    last = issue(group_, "all-reduce", tag + " P", bytes_of(s.p_memory), [&] { return group_.pg->allreduce(t); });
  }
  return last;
}

void PowerSgd::finish(size_t index, bool last) {
  torch::NoGradGuard no_grad;
  BucketState& s = buckets_[index];
  if (s.compressing) {
    const int64_t world = group_.size();
    if (s.first_pending) wait(group_, s.first), s.first_pending = false;
    // The uncompressed tensors: summed, now divided, back into the bucket.
    s.uncompressed_memory.div_(world);
    int64_t at = 0;
    for (auto& t : s.uncompressed) {
      t.copy_(s.uncompressed_memory.narrow(0, at, t.numel()).view_as(t));
      at += t.numel();
    }
    // P summed: orthogonalise, then Q = Mᵀ P, summed and divided; M ≈ P Qᵀ.
    for (auto& x : s.matrices) orthogonalize(x.p);
    for (auto& x : s.matrices) at::bmm_out(x.q, x.m.unsqueeze(0).transpose(1, 2), x.p);
    if (s.q_memory.numel() > 0) {
      std::vector<torch::Tensor> t{s.q_memory};
      run(group_, "all-reduce", s.tag + " Q", bytes_of(s.q_memory), [&] { return group_.pg->allreduce(t); });
    }
    s.q_memory.div_(world);
    for (auto& x : s.matrices) {
      torch::Tensor out = x.m.unsqueeze(0);
      at::bmm_out(out, x.p, x.q.transpose(1, 2));
    }
    s.error = s.input - s.flat;  // error feedback: what this step's approximation lost
    s.input = torch::Tensor(), s.flat = torch::Tensor();
  }
  if (!last) return;
  if (s.compressing && !reported_) {  // the first compressed step: the bytes, once
    reported_ = true;
    // Steps count from 1, as in the progress lines; the hook counts its own (a resumed run starts
    // its state, warm-up included, afresh: see above).
    log("PowerSGD from step " + std::to_string(iter_ + 1) + ": this rank all-reduces " + std::to_string(step_bytes_) +
        " bytes of gradients per step (" + std::to_string(step_matrices_) + " matrices as P and Q, " +
        std::to_string(step_pq_floats_) + " floats; " + std::to_string(step_plain_floats_) + " floats uncompressed) instead of " +
        std::to_string(step_full_bytes_));
  }
  ++iter_;  // PyTorch's maybe_increase_iter on the last bucket
}

CommHook powersgd_hook(Group& group, const PowerSgdOptions& o, const std::vector<torch::Tensor>& params) {
  auto state = std::make_shared<PowerSgd>(group, o, params);
  return [state](GradBucket& bucket) {
    Reduction r;
    r.work = state->launch(bucket.index, bucket.buffer, bucket.gradients, bucket.tag);  // uncompressed, then P
    r.finish = [state, index = bucket.index, last = bucket.is_last] { state->finish(index, last); };  // Q
    return r;
  };
}

}  // namespace ddp
