// defines: the ring all-reduce of chapter 03 cut in its two halves, each a collective of its own:
// the reduce-scatter (each rank ends with one chunk, summed over the ranks) and the all-gather
// (each rank ends with every rank's chunk). FSDP runs them apart: Note [The ring's two halves].
#pragma once
#include <torch/torch.h>

#include "common/group/compat.h"

namespace ch07 {

// Note [The ring's two halves]
// Chapter 03's ring all-reduce is a reduce-scatter (n-1 steps: a partial sum goes round, each
// rank adding its own) followed by an all-gather (n-1 steps: the finished chunks go round,
// copied). Here they are 03's, in 03's direction (send to rank+1, receive from rank-1), over
// equal chunks (Note [Sharding a unit] pads them), shifted one chunk in both halves: at each step
// a rank handles the chunk one index lower than 03's (rank-s-1 where 03 has rank-s), so that
// rank r ends with chunk r, the rows it owns, where 03's ends with chunk r+1. Chunk r is summed starting at rank r+1, then r+2, ..., and rank r
// adds its own last; then it is divided by n (ReduceOp.AVG). Each half sends (n-1)/n of the
// tensor from every rank, half of the all-reduce's 2(n-1)/n. DDP needs both at once: every
// rank needs every averaged gradient. FSDP needs them at different times: a rank steps only the
// parameters it owns, so it needs only its own chunk of each averaged gradient (the
// reduce-scatter, after backward), and every rank needs every parameter only while a unit
// computes (the all-gather, before its forward and its backward). So a step of m micro-batches
// sends (2m + 1)(n-1)/n of the (padded) parameters: 3(n-1)/n at m = 1, 1.5x DDP's 2(n-1)/n,
// which buys keeping 1/n of everything. At 2 ranks every element is a + b; from 3 on the order
// of the additions is the ring's; --collectives gloo-order sums in PyTorch's Gloo's (Note [Summing
// in Gloo's order], a second reading).

// Every rank's `shard` into `out` (world x shard.numel() elements, rank r's at r x numel):
// all_gather_into_tensor(out, shard). Returns the bytes this rank sent. `tag` keeps apart
// collectives that run at the same time (a prefetch beside a reduce-scatter).
int64_t ring_all_gather(ddp::Backend& pg, const torch::Tensor& shard, const torch::Tensor& out, int tag);

// `in` is world chunks of out.numel() elements, rank-major; chunk r, summed over the ranks and
// divided by the world size, into `out` on rank r: reduce_scatter_tensor(out, in, op=AVG), in
// the ring's order. Uses `in` as scratch. Returns the bytes this rank sent.
int64_t ring_reduce_scatter_avg(ddp::Backend& pg, const torch::Tensor& in, const torch::Tensor& out, int tag);

// ---- A second reading: the order PyTorch's Gloo sums in (--collectives gloo-order) ----

// Note [Summing in Gloo's order]
// A named step of its own, off by default: `--collectives gloo-order` runs the reduce-scatter
// below instead of the ring's, so that every element is summed in the order PyTorch's Gloo
// sums it, and the parameters are bit-identical to PyTorch's fully_shard (the parity runs
// against PyTorch 2.11 pass it). PyTorch 2.11's Gloo reduce-scatter is an all-reduce of the whole input
// followed by a slice (torch/csrc/distributed/c10d/ProcessGroupGloo.cpp,
// ProcessGroupGloo::reduce_scatter_tensor_coalesced), and Gloo's all-reduce (gloo/allreduce.cc)
// differs from the ring of Note [The ring's two halves] twice. It sends the other way, to
// rank-1: share r starts at rank r-1, collects r-2, r-3, ... and ends at r. And it does not cut
// the input where the chunks of a reduce-scatter lie: it cuts it into segments of a 2n-th of it
// (at most 1 MiB) and gives each rank a share of them, share k being [k G, (k+1) G)
// (G = gloo_share_elements()). G is a chunk's size when 2n divides the input, and a little more
// when it does not (fc1 of the MLP at 3 ranks: 134235 elements a rank, shares of 134236): then
// the first elements of chunk r belong to share r-1 and are summed in its order. Float sums in
// another order round otherwise, now and then. So this reduce-scatter runs its ring over Gloo's
// shares, in Gloo's direction, and then moves the few elements that lie in another rank's share
// to their owner (the re-cut: at most n-1 elements a rank for a unit under 2n MiB; the log
// counts its bytes apart). At 2 ranks both orders are a + b: the same bits as the ring's. With
// Debian's 1.13, whose Gloo has no reduce-scatter, it is one order of the sums among others.
int64_t gloo_order_reduce_scatter_avg(ddp::Backend& pg, const torch::Tensor& in, const torch::Tensor& out, int tag,
                                      int64_t* recut);
int64_t gloo_share_elements(int64_t elements, int n, int64_t element_size);

}  // namespace ch07
