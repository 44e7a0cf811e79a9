// provides: the ring's two halves. See Note [The ring's two halves] in ring_halves.h.
#include "07_fsdp/ring_halves.h"

namespace ch07 {
namespace {

// One step of a ring: send `out` to rank `to`, receive `in` from rank `from`, both posted before
// either is waited for. Even ranks post the send first, odd ranks the receive, as chapter 03's
// ring does (NCCL runs two ranks' sends and receives in order: at 2 ranks they must pair up).
int64_t exchange(ddp::Backend& pg, const torch::Tensor& out, int to, const torch::Tensor& in, int from, int tag) {
  std::vector<torch::Tensor> outs{out}, ins{in};
  c10::intrusive_ptr<c10d::Work> send, recv;
  // An empty piece is neither sent nor received: both sides know its size.
  auto post_send = [&] { if (out.numel() > 0) send = pg.send(outs, to, tag); };
  auto post_recv = [&] { if (in.numel() > 0) recv = pg.recv(ins, from, tag); };
  if (pg.getRank() % 2 == 0) post_send(), post_recv();
  else post_recv(), post_send();
  if (send) send->wait();  // wait(): the group's --timeout
  if (recv) recv->wait();
  return send ? out.numel() * out.element_size() : 0;
}

}  // namespace

int64_t ring_all_gather(ddp::Backend& pg, const torch::Tensor& shard, const torch::Tensor& out, int tag) {
  const int n = pg.getSize(), rank = pg.getRank();
  const int64_t size = shard.numel();
  auto chunk = [&](int k) { return out.view(-1).narrow(0, ((k % n + n) % n) * size, size); };
  chunk(rank).copy_(shard.view(-1));
  int64_t sent = 0;
  // 03's all-gather, one chunk index lower: at step s pass chunk rank-s on to rank+1 (at s = 0 our own), receive
  // chunk rank-s-1 from rank-1, in place.
  for (int s = 0; s < n - 1; ++s) sent += exchange(pg, chunk(rank - s), (rank + 1) % n, chunk(rank - s - 1), (rank - 1 + n) % n, tag + s);
  return sent;
}

int64_t ring_reduce_scatter_avg(ddp::Backend& pg, const torch::Tensor& in, const torch::Tensor& out, int tag) {
  const int n = pg.getSize(), rank = pg.getRank();
  const int64_t size = out.numel();
  auto chunk = [&](int k) { return in.view(-1).narrow(0, ((k % n + n) % n) * size, size); };
  torch::Tensor incoming = torch::empty({size}, in.options());
  int64_t sent = 0;
  // 03's reduce-scatter, one chunk index lower: at step s send our partial sum of chunk rank-s-1 to
  // rank+1 (at s = 0 our own gradient), receive rank-1's partial of chunk rank-s-2 and add ours
  // to it. After n-1 steps chunk rank-n, our own, is summed over every rank.
  for (int s = 0; s < n - 1; ++s) {
    sent += exchange(pg, chunk(rank - s - 1), (rank + 1) % n, incoming, (rank - 1 + n) % n, tag + s);
    chunk(rank - s - 2).add_(incoming);
  }
  out.view(-1).copy_(chunk(rank)).div_(n);  // AVG: the sum, then divided by n
  return sent;
}

// ---- A second reading: Note [Summing in Gloo's order] ----

int64_t gloo_order_reduce_scatter_avg(ddp::Backend& pg, const torch::Tensor& in, const torch::Tensor& out, int tag, int64_t* recut) {
  const int n = pg.getSize(), rank = pg.getRank();
  const int64_t size = out.numel(), total = in.numel();
  torch::Tensor flat = in.view(-1);
  // Gloo's shares (Note [Summing in Gloo's order]): share k is [k G, (k+1) G), cut at the end.
  const int64_t share = gloo_share_elements(total, n, in.element_size());
  auto part = [&](int64_t from, int64_t to) {
    from = std::min(from, total), to = std::clamp(to, from, total);
    return flat.narrow(0, from, to - from);
  };
  auto share_of = [&](int k) {
    k = (k % n + n) % n;
    return part(k * share, (k + 1) * share);
  };
  int64_t sent = 0;
  torch::Tensor incoming = torch::empty({share}, in.options());
  // Gloo's direction: at step s send our partial sum of share rank+1+s (at s = 0 our own
  // gradient) to rank-1; receive rank+1's partial of share rank+2+s and add our own to it. After n-1 steps the
  // share we received last is ours, rank + n, summed over every rank. (A share past the end of
  // a small tensor is empty: neither side sends it.)
  for (int s = 0; s < n - 1; ++s) {
    torch::Tensor mine = share_of(rank + 2 + s), theirs = incoming.narrow(0, 0, mine.numel());
    sent += exchange(pg, share_of(rank + 1 + s), (rank - 1 + n) % n, theirs, (rank + 1) % n, tag + s);
    mine.add_(theirs);
  }
  // Re-cut: chunk r (what rank r owns) is [r size, (r+1) size); the rows of it that fell in
  // another rank's share come from that rank, every pair in one order on every rank.
  int64_t moved = 0;
  for (int from = 0; from < n; ++from) {
    for (int to = 0; to < n; ++to) {
      const int64_t lo = std::max(from * share, to * size), hi = std::min((from + 1) * share, (to + 1) * size);
      if (from == to || hi <= lo || (rank != from && rank != to)) continue;
      std::vector<torch::Tensor> piece{part(lo, hi)};
      if (rank == from) {
        pg.send(piece, to, tag + n + from * n + to)->wait();
        moved += piece[0].numel() * piece[0].element_size();
      } else {
        pg.recv(piece, from, tag + n + from * n + to)->wait();
      }
    }
  }
  if (recut) *recut += moved;
  out.view(-1).copy_(part(rank * size, (rank + 1) * size)).div_(n);  // AVG: the sum, then divided by n, as Gloo's
  return sent + moved;
}

int64_t gloo_share_elements(int64_t elements, int n, int64_t element_size) {
  const int64_t bytes = elements * element_size, max_segment = (int64_t{1} << 20) / element_size * element_size;
  // gloo/allreduce.cc: a segment is bytes / 2n rounded up, at most 1 MiB, a whole number of
  // elements; the segments are at least 2n, as many for every rank.
  const int64_t segment = (std::min((bytes + 2 * n - 1) / (2 * n), max_segment) + element_size - 1) / element_size * element_size;
  const int64_t segments = std::max((bytes + segment - 1) / segment, int64_t{2} * n);
  const int64_t per_rank = (segments + n - 1) / n;
  return per_rank * segment / element_size;
}

}  // namespace ch07
