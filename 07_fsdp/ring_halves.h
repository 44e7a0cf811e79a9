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
// copied). Each half sends (n-1)/n of the tensor from every rank, half of the all-reduce's
// 2(n-1)/n. DDP needs both at once: every rank needs every averaged gradient. FSDP needs them
// at different times: a rank steps only the parameters it owns, so it needs only its own chunk
// of each averaged gradient (the reduce-scatter, after backward), and every rank needs every
// parameter only while a unit computes (the all-gather, before its forward and its backward).
// So per step FSDP sends one all-reduce's worth for the gradients plus one more half for the
// second all-gather (before backward): 3(n-1)/n of the parameters, 1.5x DDP's traffic, which
// buys keeping 1/n of everything.
//
// The direction. Ours sends to rank-1 and receives from rank+1, as Gloo's own ring does, so
// that the part rank r owns is summed in Gloo's order: it starts at rank r-1, collects r-2,
// r-3, ... and ends at r, which adds its own last; then it is divided by n (ReduceOp.AVG).
// Float addition is not associative: the order is what makes the sums bit-identical to
// c10d's reduce_scatter_tensor, and so to PyTorch's fully_shard, which calls it; where Gloo
// cuts the parts is the other half of that (Note [Summing in Gloo's order]).

// Every rank's `shard` into `out` (world x shard.numel() elements, rank r's at r x numel):
// all_gather_into_tensor(out, shard). Returns the bytes this rank sent. `tag` keeps apart
// collectives that run at the same time (a prefetch beside a reduce-scatter).
int64_t ring_all_gather(ddp::Backend& pg, const torch::Tensor& shard, const torch::Tensor& out, int tag);

// `in` is world chunks of out.numel() elements, rank-major; chunk r, summed over the ranks and
// divided by the world size, into `out` on rank r: reduce_scatter_tensor(out, in, op=AVG), each
// element summed in the order Gloo's sums it (Note [Summing in Gloo's order]). Uses `in` as
// scratch. Returns the bytes this rank sent; `recut`, if given, gets those of the re-cut added.
int64_t ring_reduce_scatter_avg(ddp::Backend& pg, const torch::Tensor& in, const torch::Tensor& out, int tag,
                                int64_t* recut = nullptr);

// Note [Summing in Gloo's order]
// LibTorch 2.11's Gloo has a reduce_scatter_tensor, but it is an all-reduce of the whole input
// followed by a slice (ProcessGroupGloo::reduce_scatter_tensor_coalesced), and Gloo's
// all-reduce (gloo/allreduce.cc) does not cut the input where the chunks of a reduce-scatter
// lie: it cuts it into segments of a 2n-th of it (at most 1 MiB) and gives each rank a share
// of them, share k being [k G, (k+1) G) (G = gloo_share_elements()), summed in the order of
// the Note above, k-1 first, k last. G is a shard's size when 2n divides the input, and a little more when it
// does not (fc1 of the MLP at 3 ranks: 134235 elements a rank, shares of 134236): then the
// first elements of chunk r belong to share r-1 and are summed in its order. Float sums in
// another order round otherwise, now and then: measured, one element of fc1's 401920 after 4
// steps at 3 ranks with accumulation, 4.66e-10 apart from fully_shard. So our reduce-scatter
// runs its ring over Gloo's shares, not over the chunks, and then moves the few elements that
// lie in another rank's share to their owner (the re-cut: at most n-1 elements a rank for a
// unit under 2n MiB). Gloo's all-reduce sends twice a reduce-scatter's bytes; ours, the
// reduce-scatter's and the re-cut's. What it buys: bit-identity with fully_shard where PyTorch
// runs it (2.x: the tests compare the two); with Debian's 1.13, whose Gloo has no
// reduce-scatter, it is one order of the sums among others. A second reading's Note.
int64_t gloo_share_elements(int64_t elements, int n, int64_t element_size);

}  // namespace ch07
