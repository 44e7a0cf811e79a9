// provides: FullyShardedDataParallel. Read the Notes in order: [Sharding a unit], [A step of
// FSDP], [Freeing what autograd saved], [Prefetch].
#include "07_fsdp/fsdp.h"

#include <torch/csrc/autograd/engine.h>

#include <sstream>

#include "07_fsdp/ring_halves.h"
#include "common/basics/errors.h"

namespace ch07 {

// Note [Sharding a unit]
// Each parameter is cut by its first dimension (its rows) into world chunks of ceil(rows /
// world) rows, torch.chunk's cut; rank r owns chunk r. When world does not divide rows, the last
// chunks are short or empty (fc3's 10 rows at 4 ranks: 3, 3, 3, 1) and each is padded with zero
// rows to the full chunk, so that every rank's shard of the unit has the same size: the
// collectives move equal pieces. A rank's shard is its chunk of each parameter of the unit, one
// after another, padding included; the optimizer sees only the real rows (the padding is never
// stepped, it stays 0). This is PyTorch's fully_shard (FSDP2): each parameter a DTensor Shard(0)
// (a tensor cut by rows over the ranks) of the same rows, the same layout for its all-gather and
// reduce-scatter per unit, and so the same owner of each element's sum (the ring's two halves).

// Note [A step of FSDP]
// Forward, unit by unit: all-gather the unit's shards into its whole parameters, compute,
// free the whole parameters. Backward reaches the units in reverse order; before a unit's
// backward its parameters are gathered again (forward freed them), after it they are freed, and
// the unit's whole gradients averaged and cut in one reduce-scatter, each rank keeping the rows
// it owns, then freed too. The optimizer then steps each rank's shards:
// the same elementwise arithmetic as on whole parameters, on 1/world of them.
// Where backward passes from unit u to unit u-1 there is a tensor, the output of u-1 and the
// input of u: a hook on it runs once unit u's backward is done, and before unit u-1's begins
// (autograd runs a gradient's accumulation before anything else that is ready, and a hook on a
// tensor before the node that made it). A hook on the model's output starts backward; the first
// unit's input needs no gradient, so a callback queued for the end of backward finishes it.
// PyTorch's FSDP2 hooks the same places (its RegisterPostBackwardFunction, on each unit's
// inputs, and _root_post_backward_final_callback).

// Note [Freeing what autograd saved]
// Freeing a unit's whole parameters after its forward is what keeps a rank near 1/N between
// units, but autograd has saved them: a linear layer's backward needs its weight. So what is freed is the memory under
// them, not the tensors: the storage is given back (0 bytes) and, before backward, given new
// memory of the same size and refilled; the tensors autograd saved point at it again. PyTorch
// does the same (FSDP2 resizes the unsharded parameters' storage to 0 and back). The refill
// writes through a tensor of its own over that memory (from_blob), not through the parameter:
// a write to a saved tensor would bump its version, and backward would refuse it as modified.

namespace {

// The parameter's memory given back (bytes = 0) or given anew (its full size), under the same tensor.
void set_storage(const torch::Tensor& p, bool whole) {
  c10::StorageImpl* s = p.storage().unsafeGetStorageImpl();
  const size_t bytes = whole ? static_cast<size_t>(p.numel()) * p.element_size() : 0;
  s->set_data_ptr_noswap(whole ? s->allocator()->allocate(bytes) : at::DataPtr(nullptr, p.device()));
  s->set_nbytes(bytes);
}

// --collectives c10d: the process group's own two collectives (at the end of this file).
std::future<int64_t> c10d_all_gather(ddp::Backend& pg, torch::Tensor shard, torch::Tensor out);
void c10d_reduce_scatter_avg(ddp::Backend& pg, torch::Tensor in, torch::Tensor out);

}  // namespace

FullyShardedDataParallel::FullyShardedDataParallel(std::vector<UnitSpec> units, ddp::Group& group, Collectives collectives,
                                                   int prefetch)
    : group_(group), collectives_(collectives), prefetch_(prefetch) {
  const int world = group.size(), rank = group.rank();
  torch::NoGradGuard no_grad;
  for (UnitSpec& spec : units) {
    Unit u;
    u.name = spec.name;
    u.forward = std::move(spec.forward);
    u.params = spec.module->parameters();
    u.first_param = shard_params_.size();
    std::vector<std::string> names = spec.module->named_parameters().keys();
    for (const torch::Tensor& p : u.params) {
      const int64_t rows = p.dim() > 0 ? p.size(0) : 1;
      u.rows.push_back(rows);
      u.row_elems.push_back(rows ? p.numel() / rows : 0);
      u.chunk_rows.push_back((rows + world - 1) / world);
      u.offsets.push_back(u.shard_numel);
      u.shard_numel += u.chunk_rows.back() * u.row_elems.back();
      u.numel += p.numel();
    }
    u.shard = torch::zeros({u.shard_numel}, u.params.at(0).options());  // padding: zeros
    for (size_t i = 0; i < u.params.size(); ++i) {
      const torch::Tensor& p = u.params[i];
      const int64_t first = std::min(rank * u.chunk_rows[i], u.rows[i]), mine = std::clamp<int64_t>(u.rows[i] - first, 0, u.chunk_rows[i]);
      torch::Tensor rows_here = u.shard.narrow(0, u.offsets[i], mine * u.row_elems[i]);
      rows_here.copy_(p.reshape(-1).narrow(0, first * u.row_elems[i], mine * u.row_elems[i]));
      std::vector<int64_t> shape = p.sizes().vec();
      if (!shape.empty()) shape[0] = mine;
      shard_params_.push_back(rows_here.view(shape).requires_grad_(true));  // a view into the shard: the optimizer steps it in place
      info_.push_back({u.name + "." + names[i], p.sizes().vec(), first, u.chunk_rows[i]});
    }
    units_.push_back(std::move(u));
  }
  for (size_t u = 0; u < units_.size(); ++u) reshard(u);
}

int FullyShardedDataParallel::tag(size_t u, int kind) const {
  const int n = group_.size();  // each collective its own range of tags: n-1 ring steps, n x n re-cut pairs
  return 100 + static_cast<int>(2 * u + kind) * (n + n * n + 1);
}

void FullyShardedDataParallel::issue_all_gather(size_t u) {
  Unit& unit = units_[u];
  if (unit.whole || unit.gathering.valid()) return;
  unit.gathered = torch::empty({group_.size() * unit.shard_numel}, unit.shard.options());
  if (collectives_ == Collectives::kC10d) {
    unit.gathering = c10d_all_gather(*group_.pg, unit.shard, unit.gathered);
    return;
  }
  // The ring's all-gather, on a thread of its own, so that the caller computes meanwhile (Note
  // [Prefetch]). Its sends and receives carry tags of their own: they cannot meet another collective's.
  unit.gathering = std::async(std::launch::async, [pg = group_.pg.get(), in = unit.shard, out = unit.gathered, t = tag(u, 0)] {
    return ring_all_gather(*pg, in, out, t);
  });
}

void FullyShardedDataParallel::unshard(size_t u) {
  Unit& unit = units_[u];
  if (unit.whole) return;
  issue_all_gather(u);
  bytes_sent_ += unit.gathering.get();  // waits; rethrows a failure (a rank gone: the group's --timeout)
  torch::NoGradGuard no_grad;
  const int world = group_.size();
  for (size_t i = 0; i < unit.params.size(); ++i) {
    const torch::Tensor& p = unit.params[i];
    set_storage(p, true);
    torch::Tensor into = torch::from_blob(p.data_ptr(), {p.numel()}, p.options());  // Note [Freeing what autograd saved]
    const int64_t re = unit.row_elems[i];
    for (int q = 0; q < world; ++q) {  // rank q's rows of it, without their padding
      const int64_t first = std::min(q * unit.chunk_rows[i], unit.rows[i]), n = std::clamp<int64_t>(unit.rows[i] - first, 0, unit.chunk_rows[i]);
      into.narrow(0, first * re, n * re).copy_(unit.gathered.narrow(0, q * unit.shard_numel + unit.offsets[i], n * re));
    }
  }
  unit.gathered = torch::Tensor();
  unit.whole = true;
}

void FullyShardedDataParallel::reshard(size_t u) {
  for (const torch::Tensor& p : units_[u].params) set_storage(p, false);
  units_[u].whole = false;
}

// Note [Prefetch]
// Without it a unit's all-gather starts when the unit is reached, and the unit waits for all of
// it. With --prefetch d, reaching unit u issues the all-gathers of the next d units too (in
// backward: the d before it), so they travel while unit u computes; a unit then waits only for
// what is left of its own. The price: up to d+1 units whole at once instead of one. PyTorch
// 2.11's FSDP2 prefetches one unit ahead in backward by default, in reverse forward order
// (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py, FSDPParamGroup._backward_prefetch);
// in forward it issues each unit's all-gather in that unit's own pre-forward and prefetches
// explicitly only when asked (_fully_shard.py, FSDPModule.set_modules_to_forward_prefetch), its
// "implicit" forward prefetch being a CUDA stream's overlap, which a CPU does not have. So our
// default, --prefetch 1, is FSDP2's in backward and FSDP2 with set_modules_to_forward_prefetch
// (the next unit) in forward. Which data the collectives move, and so the numbers, do not
// depend on it: --prefetch changes when, never what.

torch::Tensor FullyShardedDataParallel::forward(const torch::Tensor& input) {
  const bool for_backward = torch::GradMode::is_enabled();
  const size_t n = units_.size();
  torch::Tensor x = input;
  for (size_t u = 0; u < n; ++u) {
    issue_all_gather(u);
    for (size_t k = 1; k <= static_cast<size_t>(prefetch_) && u + k < n; ++k) issue_all_gather(u + k);
    unshard(u);
    if (for_backward && u > 0 && x.requires_grad()) {  // between units u-1 and u (Note [A step of FSDP])
      x.register_hook([this, u](const at::TensorBase&) {
        post_backward(u);
        pre_backward(u - 1);
      });
    }
    x = units_[u].forward(x);
    reshard(u);
  }
  if (for_backward && x.requires_grad()) {
    x.register_hook([this, n](const at::TensorBase&) {  // backward starts
      for (Unit& unit : units_) unit.reduced = false;
      torch::autograd::Engine::get_default_engine().queue_callback([this] { finish_backward(); });
      pre_backward(n - 1);
    });
  }
  return x;
}

void FullyShardedDataParallel::pre_backward(size_t u) {
  issue_all_gather(u);
  for (size_t k = 1; k <= static_cast<size_t>(prefetch_) && k <= u; ++k) issue_all_gather(u - k);
  unshard(u);
}

void FullyShardedDataParallel::post_backward(size_t u) {
  Unit& unit = units_[u];
  if (unit.reduced) return;
  unit.reduced = true;
  reshard(u);  // its backward is done: nothing needs the whole parameters any more
  if (!sync_) return;  // no_sync(): the whole gradients stay, summed by autograd over the micro-batches
  torch::NoGradGuard no_grad;
  const int world = group_.size();
  // Rank-major: rank q's chunk of every parameter's gradient, padded, then rank q+1's.
  torch::Tensor in = torch::zeros({world * unit.shard_numel}, unit.shard.options());
  for (size_t i = 0; i < unit.params.size(); ++i) {
    torch::Tensor g = unit.params[i].grad().reshape(-1);
    const int64_t re = unit.row_elems[i];
    for (int q = 0; q < world; ++q) {
      const int64_t first = std::min(q * unit.chunk_rows[i], unit.rows[i]), rows = std::clamp<int64_t>(unit.rows[i] - first, 0, unit.chunk_rows[i]);
      in.narrow(0, q * unit.shard_numel + unit.offsets[i], rows * re).copy_(g.narrow(0, first * re, rows * re));
    }
  }
  torch::Tensor mine = torch::empty({unit.shard_numel}, unit.shard.options());
  if (collectives_ == Collectives::kRing) bytes_sent_ += ring_reduce_scatter_avg(*group_.pg, in, mine, tag(u, 1));
  if (collectives_ != Collectives::kRing) reduce_scatter_past_the_lesson(u, in, mine);  // gloo-order, c10d
  // This rank's rows of each averaged gradient: its shard's .grad(), added as autograd would.
  for (size_t i = 0; i < unit.params.size(); ++i) {
    torch::Tensor& shard = shard_params_[unit.first_param + i];
    torch::Tensor g = mine.narrow(0, unit.offsets[i], shard.numel()).view(shard.sizes());
    if (shard.grad().defined()) shard.mutable_grad().add_(g);
    else shard.mutable_grad() = g;
    unit.params[i].mutable_grad() = torch::Tensor();  // the whole gradient freed
  }
}

void FullyShardedDataParallel::finish_backward() {
  for (size_t u = units_.size(); u-- > 0;) post_backward(u);  // the first unit; any a hook did not reach
}

std::vector<torch::Tensor> FullyShardedDataParallel::full_parameters() {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> all;
  for (size_t u = 0; u < units_.size(); ++u) {
    unshard(u);
    for (const torch::Tensor& p : units_[u].params) all.push_back(p.clone());
    reshard(u);
  }
  return all;
}

FullyShardedDataParallel::Sizes FullyShardedDataParallel::sizes() const {
  Sizes s;
  for (const Unit& u : units_) {
    s.params += u.numel;
    s.shard += u.shard_numel;
    s.largest_unit = std::max(s.largest_unit, u.numel);
  }
  return s;
}

std::string FullyShardedDataParallel::describe() const {
  std::ostringstream out;
  out << units_.size() << " units:";
  for (size_t u = 0; u < units_.size(); ++u) {
    out << (u ? ", " : " ") << units_[u].name << " (" << units_[u].numel << " elements, " << units_[u].shard_numel << " a rank)";
  }
  return out.str();
}

// ---- Past the lesson: --collectives gloo-order and c10d ----

void FullyShardedDataParallel::reduce_scatter_past_the_lesson(size_t u, const torch::Tensor& in, const torch::Tensor& mine) {
  if (collectives_ == Collectives::kRingInGlooOrder) {  // Note [Summing in Gloo's order]
    bytes_sent_ += gloo_order_reduce_scatter_avg(*group_.pg, in, mine, tag(u, 1), &recut_bytes_);
  } else {
    c10d_reduce_scatter_avg(*group_.pg, in, mine);
  }
}

namespace {

std::future<int64_t> c10d_all_gather(ddp::Backend& pg, torch::Tensor shard, torch::Tensor out) {
#if TORCH_VERSION_MAJOR >= 2
  // c10d's collectives run on the backend's own threads already; but each rank must start them in
  // one order (Gloo pairs them by a counter), so they are started here, on the caller's thread,
  // and only the wait is left for later.
  c10::intrusive_ptr<c10d::Work> work = pg._allgather_base(out, shard);
  return std::async(std::launch::deferred, [work] {
    work->wait();
    return int64_t{0};  // the backend's bytes, not counted here
  });
#else
  throw std::logic_error("c10d's all-gather into one tensor is not in LibTorch 1.13");
#endif
}

void c10d_reduce_scatter_avg(ddp::Backend& pg, torch::Tensor in, torch::Tensor out) {
#if TORCH_VERSION_MAJOR >= 2
  c10d::ReduceScatterOptions avg;
  avg.reduceOp = c10d::ReduceOp::AVG;
  pg._reduce_scatter_base(out, in, avg)->wait();  // the backend's bytes, not counted here
#else
  throw std::logic_error("c10d's reduce-scatter is not in LibTorch 1.13");
#endif
}

}  // namespace

}  // namespace ch07
