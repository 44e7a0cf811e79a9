// 03_manual_allreduce: data parallelism by hand — every rank trains on its own data, and the
// gradients are averaged with an all-reduce after backward, so every rank takes the same step.
//
// The lesson: after `autograd::grad`, all-reduce each gradient (SUM), divide by the world size,
// and apply the update. Every rank then holds the same parameters, and they equal (up to the
// order of floating-point sums) one process trained on all ranks' data at once. With
// `--allreduce ring` the all-reduce is our own ring, written below from send and recv.
//
// Usage (one terminal per rank, as in 01):
//   ./build-cpu/03_manual_allreduce --rank 0 --world-size 2
//   ./build-cpu/03_manual_allreduce --rank 1 --world-size 2
// Forked by chapter 02's launcher:
//   ./build-cpu/02_spawn --nproc-per-node 2 -- ./build-cpu/03_manual_allreduce
// The ring all-reduce of this file instead of c10d's, checked against c10d's at every step:
//   ./build-cpu/02_spawn --nproc-per-node 3 -- ./build-cpu/03_manual_allreduce --allreduce ring
// With a timeline of every step (open it in https://ui.perfetto.dev; docs/observing.md):
//   ./build-cpu/02_spawn --nproc-per-node 2 -- ./build-cpu/03_manual_allreduce --trace runs/03.json
//
// Expected output (rank 0; trimmed):
//   [rank 0/2] step 1: loss 0.2615 (mean over ranks)
//   [rank 0/2] step 20: loss 0.1072 (mean over ranks)
//   [rank 0/2] check: every rank holds the same parameters: OK
//   [rank 0/2] check: single process on the global batch: max |diff| = 2.98e-08 <= 1e-05: OK
//   [rank 0/2] check: the loss went down: 0.2615 -> 0.1072: OK
//   [rank 0/2] params fingerprint bbff0abd97303d08 (bit-identical runs print the same)
// With --allreduce ring at 3 ranks, before those checks (the ranks' counts differ: uneven chunks):
//   [rank 0/3] ring: sent 868 bytes per step; 2(n-1)/n x 644 bytes = 858.7
//   [rank 0/3] check: ring bytes sent by all ranks: 2576 = 2(n-1) x 644: OK
//   [rank 0/3] check: ring against c10d's all-reduce: max |diff| = 5.96e-08 (tolerance 1e-05): OK

#include <algorithm>
#include <cstdio>

#include "common/basics/cli.h"
#include "common/basics/failure.h"
#include "common/observe/flight_recorder.h"
#include "common/basics/log.h"
#include "common/group/process_group.h"
#include "common/observe/run_trace.h"
#include "common/data/toy_task.h"
#include "common/observe/trace.h"

namespace ch03 {
// The ring all-reduce, written out from send and recv below main (step 4 calls it with
// --allreduce ring): sums `t` over the ranks in place, returns the bytes this rank sent.
int64_t ring_allreduce(ddp::Backend& pg, torch::Tensor& t);
}  // namespace ch03

int main(int argc, char** argv) {
  CLI::App app{"03_manual_allreduce: train with gradients all-reduced by hand after backward"};
  ddp::CommonFlags flags;
  ddp::add_common_flags(app, flags);
  ddp::toy::TrainFlags train;
  ddp::toy::add_train_flags(app, train);
  ddp::toy::TrainConfig& cfg = train.cfg;
  std::string allreduce = "c10d";
  app.add_option("--allreduce", allreduce, "c10d: the process group's all-reduce; ring: ch03::ring_allreduce (below main), "
                                           "checked against c10d's at every step")
      ->check(CLI::IsMember({"c10d", "ring"}));
  ddp::parse_flags(app, argc, argv);

  return ddp::guarded_main([&] {
    // 1. Join the group (chapter 01's steps; --explain-env prints the settings and stops).
    std::optional<ddp::Group> joined = ddp::join_or_explain(flags);
    if (!joined) return ddp::kExitOk;
    ddp::Group& group = *joined;
    const int rank = group.rank(), world = group.size();
    ddp::open_trace(train.trace, group);  // --trace: forward, backward, each all-reduce, update

    // 2. The same model on every rank: the same seed gives the same initial weights. It lives
    //    on this rank's device: the CPU with Gloo, cuda:<local rank> with NCCL.
    const torch::Device device = ddp::device_for(group.info);
    auto model = ddp::toy::make_model(cfg.seed);
    model->to(device);
    std::vector<torch::Tensor> params = model->parameters();
    if (rank == 0 && !train.save_init.empty()) ddp::toy::save_params(params, train.save_init);

    // 3. Train. Each rank sees only its own slice of every step's global batch.
    ddp::toy::LossLog losses(group, cfg.steps);
    int64_t ring_bytes = 0;  // --allreduce ring: the bytes this rank sent in the last step
    double ring_diff = 0;    // ... and how far the ring's sums were from c10d's, over all steps
    bool ring_identical = true;
    for (int step = 0; step < cfg.steps; ++step) {
      auto [x, y] = ddp::toy::batch(step, rank, cfg.batch, world, device);
      torch::Tensor loss;
      std::vector<torch::Tensor> grads;
      {
        ddp::Span forward("forward");
        loss = torch::mse_loss(model->forward(x), y);
      }
      {
        ddp::Span backward("backward");
        grads = torch::autograd::grad({loss}, params);
      }

      // 4. Average the gradients across ranks: all-reduce(SUM), then divide by the world size.
      //    After this every rank holds the same gradient: the mean over all R*B samples.
      //    Only now, with backward over, does communication start: nothing overlaps it.
      //    --allreduce ring: our ring instead, and c10d's on a copy to check it against.
      ring_bytes = 0;
      for (torch::Tensor& g : grads) {
        if (allreduce == "ring") {
          std::vector<torch::Tensor> theirs{g.clone()};
          group.pg->allreduce(theirs)->wait();
          ring_bytes += ch03::ring_allreduce(*group.pg, g);
          ring_diff = std::max(ring_diff, (g - theirs[0]).abs().max().item<double>());
          ring_identical = ring_identical && torch::equal(g, theirs[0]);
        } else {
          std::vector<torch::Tensor> buffer{g};
          ddp::traced(group.pg->allreduce(buffer), "all-reduce", g.numel() * g.element_size())->wait();
        }
        g.div_(world);
      }

      // 5. The update, by hand: p <- p - lr * g, outside autograd. Same gradient, same
      //    parameters, same update: the replicas stay identical.
      {
        ddp::Span update("optimizer");
        torch::NoGradGuard no_grad;
        for (size_t k = 0; k < params.size(); ++k) params[k].add_(grads[k], -cfg.lr);
      }

      losses.add(step, loss);
    }

    // 6. Check the result three ways (exit code 1 if one fails): the ranks agree, they match
    //    one process on the global batch (see Note [Tolerance against one process] in
    //    common/data/toy_task.h), and the loss went down. With --allreduce ring, first two
    //    more: the bytes sent are what Note [The ring all-reduce] says, and the sums are c10d's.
    if (allreduce == "ring") {
      int64_t grad_bytes = 0;
      for (const torch::Tensor& p : params) grad_bytes += p.numel() * p.element_size();
      std::vector<torch::Tensor> total{torch::tensor({ring_bytes}, torch::kInt64).to(device)};
      group.pg->allreduce(total)->wait();
      // Over all ranks every chunk is sent n-1 times in each half: 2(n-1) tensors, exactly.
      const int64_t all = total[0].item<int64_t>(), expected = 2 * (world - 1) * grad_bytes;
      char line[200];
      std::snprintf(line, sizeof(line), "ring: sent %lld bytes per step; 2(n-1)/n x %lld bytes = %.1f",
                    static_cast<long long>(ring_bytes), static_cast<long long>(grad_bytes), 2.0 * (world - 1) / world * grad_bytes);
      ddp::log(line);
      std::snprintf(line, sizeof(line), "check: ring bytes sent by all ranks: %lld = 2(n-1) x %lld: %s", static_cast<long long>(all),
                    static_cast<long long>(grad_bytes), all == expected ? "OK" : "FAILED");
      ddp::log(line);
      std::snprintf(line, sizeof(line), "check: ring against c10d's all-reduce: max |diff| = %.3g%s (tolerance %.0e): %s", ring_diff,
                    ring_identical ? ", bit-identical" : "", ddp::toy::kTolerance, ring_diff <= ddp::toy::kTolerance ? "OK" : "FAILED");
      ddp::log(line);  // See Note [Ring against c10d: when the bits agree]
      DDP_CHECK(all == expected, "the ring sent " << all << " bytes in all, not " << expected);
      DDP_CHECK(ring_diff <= ddp::toy::kTolerance, "the ring's sums differ from c10d's by " << ring_diff);
    }
    ddp::toy::check_training(group, params, cfg, losses, train.save_params);
    ddp::finish_trace(train.trace, group);
    group.pg->barrier()->wait();
    return ddp::kExitOk;
  });
}

namespace ch03 {

// Note [The ring all-reduce]
// Cut the tensor into n chunks, one per rank. Reduce-scatter: in n-1 steps every rank sends a
// chunk to the next rank and adds the chunk it receives from the previous one into its own;
// then rank r holds chunk r+1 summed over all ranks. All-gather: n-1 more steps pass the summed
// chunks on around the ring, each one received in place. A rank sends 2(n-1) chunks of about
// 1/n of the tensor each: 2(n-1)/n of it (once the tensor at 2 ranks, nearing twice as n grows,
// never more), which is why the ring is the bandwidth-optimal all-reduce: in the alpha-beta model
// (bench/alpha_beta.h), where a message of b bytes costs alpha + b*beta (alpha a fixed latency
// per message, beta the time per byte), it has the smallest beta term, and pays alpha 2(n-1)
// times. c10d's Gloo all-reduce is a ring too, one that pipelines segments of at most 1 MiB,
// adding one while the next is on the wire; ours waits for each whole chunk.

// Sums `t` over the ranks, in place on every rank (what c10d's allreduce SUM does); returns
// the bytes this rank sent.
int64_t ring_allreduce(ddp::Backend& pg, torch::Tensor& t) {
  const int n = pg.getSize(), rank = pg.getRank();
  const int64_t N = t.numel();
  torch::Tensor flat = t.view(-1);  // a gradient is contiguous: every chunk is a view into it
  // Chunk k: N/n elements, one more for the first N%n chunks; empty where n > N.
  auto chunk = [&](int k) {
    k = (k % n + n) % n;
    const int64_t start = k * (N / n) + std::min<int64_t>(k, N % n);
    return flat.narrow(0, start, N / n + (k < N % n ? 1 : 0));
  };
  int64_t sent = 0;
  // One step: send `out` to the next rank and receive `in` from the previous one, both posted
  // before either is waited for. Even ranks post the send first, odd ranks the recv: NCCL runs
  // the sends and recvs between two ranks in order, on one stream, so at 2 ranks they must pair
  // up (Gloo would not mind). An empty chunk is neither sent nor received: both sides know its size.
  auto exchange = [&](const torch::Tensor& out, const torch::Tensor& in, int tag) {
    std::vector<torch::Tensor> to{out}, from{in};
    c10::intrusive_ptr<c10d::Work> send, recv;
    auto post_send = [&] { if (out.numel() > 0) send = pg.send(to, (rank + 1) % n, tag); };
    auto post_recv = [&] { if (in.numel() > 0) recv = pg.recv(from, (rank - 1 + n) % n, tag); };
    if (rank % 2 == 0) post_send(), post_recv();
    else post_recv(), post_send();
    if (send) send->wait(), sent += out.numel() * out.element_size();  // wait(): the group's --timeout
    if (recv) recv->wait();
  };
  // Reduce-scatter: at step s, send chunk rank-s (a partial sum), add chunk rank-s-1 to ours.
  for (int s = 0; s < n - 1; ++s) {
    torch::Tensor mine = chunk(rank - s - 1), incoming = torch::empty_like(mine);
    exchange(chunk(rank - s), incoming, s);
    mine.add_(incoming);
  }
  // All-gather: this rank holds chunk rank+1 complete; pass complete chunks on, in place.
  for (int s = 0; s < n - 1; ++s) exchange(chunk(rank + 1 - s), chunk(rank - s), n + s);
  return sent;
}

// Note [Ring against c10d: when the bits agree]
// Both sum the same numbers; the bits agree where the additions come in the same order. At 1
// rank nothing is added; at 2 each element is a+b, and a+b == b+a: bit-identical. From 3 ranks
// on the order is the ring's: our chunk k starts at rank k and collects ranks k+1, k+2, ...
// Gloo's ring (gloo/allreduce.cc) sends to rank-1 instead and cuts the tensor elsewhere (below
// 2n MiB: 2n segments of ceil(N/2n) elements, two to a chunk); c10d's sums matched an emulation of that
// order bit for bit in LibTorch 1.13 and 2.11. So an element's partial sums group differently:
// measured at 3, 4, 5 and 7 ranks, max |diff| 5.96e-08 to 2.38e-07 and fingerprints other than
// c10d's. A ring that sends to rank-1 and cuts where Gloo does gives bit-identical sums and c10d's
// fingerprints at all of those sizes (07's --collectives gloo-order is one): an order apart.
}  // namespace ch03
