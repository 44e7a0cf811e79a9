// provides: the ring's two halves. See Note [The ring's two halves] in ring_halves.h.
#include "07_fsdp/ring_halves.h"

namespace ch07 {
namespace {

// One step of the ring: send `out` to rank-1, receive `in` from rank+1, both posted before
// either is waited for. Even ranks post the send first, odd ranks the receive, as chapter 03's
// ring does (NCCL runs two ranks' sends and receives in order: at 2 ranks they must pair up).
int64_t exchange(ddp::Backend& pg, const torch::Tensor& out, const torch::Tensor& in, int tag) {
  const int n = pg.getSize(), rank = pg.getRank();
  std::vector<torch::Tensor> to{out}, from{in};
  c10::intrusive_ptr<c10d::Work> send, recv;
  auto post_send = [&] { send = pg.send(to, (rank - 1 + n) % n, tag); };
  auto post_recv = [&] { recv = pg.recv(from, (rank + 1) % n, tag); };
  if (rank % 2 == 0) post_send(), post_recv();
  else post_recv(), post_send();
  send->wait();  // wait(): the group's --timeout
  recv->wait();
  return out.numel() * out.element_size();
}

}  // namespace

int64_t ring_all_gather(ddp::Backend& pg, const torch::Tensor& shard, const torch::Tensor& out, int tag) {
  const int n = pg.getSize(), rank = pg.getRank();
  const int64_t size = shard.numel();
  auto chunk = [&](int k) { return out.view(-1).narrow(0, ((k % n + n) % n) * size, size); };
  chunk(rank).copy_(shard.view(-1));
  int64_t sent = 0;
  // Step s: pass on the chunk received last (at s = 0 our own), receive the next one in place.
  for (int s = 0; s < n - 1 && size > 0; ++s) sent += exchange(pg, chunk(rank + s), chunk(rank + s + 1), tag + s);
  return sent;
}

int64_t ring_reduce_scatter_avg(ddp::Backend& pg, const torch::Tensor& in, const torch::Tensor& out, int tag) {
  const int n = pg.getSize(), rank = pg.getRank();
  const int64_t size = out.numel();
  auto chunk = [&](int k) { return in.view(-1).narrow(0, ((k % n + n) % n) * size, size); };
  int64_t sent = 0;
  torch::Tensor incoming = torch::empty({size}, in.options());
  // Step s: send our partial sum of chunk rank+1+s (at s = 0 our own gradient) to rank-1;
  // receive rank+1's partial of chunk rank+2+s and add our own to it. After n-1 steps the
  // chunk we received last is ours, rank + n, summed over every rank.
  for (int s = 0; s < n - 1 && size > 0; ++s) {
    sent += exchange(pg, chunk(rank + 1 + s), incoming, tag + s);
    chunk(rank + 2 + s).add_(incoming);
  }
  out.view(-1).copy_(chunk(rank)).div_(n);  // AVG: the sum, then divided by n, as Gloo's
  return sent;
}

}  // namespace ch07
