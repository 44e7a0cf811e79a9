// allreduce_bench: all-reduce time by message size, ours (through the flight recorder, as DDP's
// buckets go) against a plain c10d Gloo all-reduce, measured in the same run. One process per
// rank, started by 02_spawn; rank 0 appends one CSV line per size for bench/cost_model. With
// --versus ring, "ours" is chapter 03's ring all-reduce (ch03::ring_allreduce, built from
// 03_manual_allreduce/main.cpp itself), and the alpha-beta model fitted to the run's c10d times
// is printed beside both.
//
// Usage (bench/cost_model.sh runs it at world sizes 2, 3 and 4):
//   ./build-cpu/02_spawn --nproc-per-node 2 -- ./build-cpu/allreduce_bench --csv runs/allreduce.csv
//   ./build-cpu/02_spawn --nproc-per-node 3 -- ./build-cpu/allreduce_bench --versus ring --max-bytes 16777216 --factor 16
//   ./build-cpu/02_spawn --nproc-per-node 2 -- ./build-cpu/allreduce_bench --dtype float16 --values gradients
//     (what --comm-hook fp16 sends: Note [What is summed])
//   ./build-cpu/02_spawn --nproc-per-node 2 -- ./build-cpu/allreduce_bench --interference 3145728
//     (compute and an all-reduce beside each other: Note [Measuring interference])
//
// Expected output (rank 0; figures of the machine it runs on):
//   [rank 0/2] world 2       4096 B: plain 101.2 us, ours 103.9 us, plain/ours 0.97
//   ...
//   [rank 0/2] world 2   67108864 B: plain 81234.0 us, ours 80987.1 us, plain/ours 1.00
// With --versus ring (bench/README.md, "Chapter 03's ring against c10d's all-reduce"):
//   [rank 0/3] world 3       4096 B: c10d 2544.6 us, ring 5005.8 us, ring/c10d 1.97
//   ...
//   [rank 0/3] alpha-beta model fitted to the c10d times above: alpha ..., beta ...
//   [rank 0/3] world 3       4096 B: model ... us; c10d/model ..., ring/model ...
// With --interference (bench/one_vs_two_ranks.sh, bench/cost_model.sh --link):
//   [rank 0/2] interference, world 2, all-reduce of 3145728 B beside a compute, 5 rounds:
//   [rank 0/2]   compute: 612.3 us a matmul alone, 1101.9 us beside the all-reduce: interference s = 0.800
//   [rank 0/2]   all-reduce: 4120.5 us alone, 6015.0 us beside the compute: slowdown a = 0.460

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

#include "common/basics/cli.h"
#include "common/basics/failure.h"
#include "common/observe/flight_recorder.h"
#include "common/basics/log.h"
#include "common/group/process_group.h"
#include "bench/alpha_beta.h"

namespace ch03 {
// Chapter 03's ring all-reduce, defined in 03_manual_allreduce/main.cpp (see CMakeLists.txt).
int64_t ring_allreduce(ddp::Backend& pg, torch::Tensor& t);
}  // namespace ch03

namespace {

// Note [Timing a collective]
// A round starts after a barrier and runs `iters` pairs: one plain all-reduce, one of ours,
// each timed on its own, so that whatever disturbs the machine (on 2 cores, 4 ranks and their
// Gloo threads take turns) hits both alike. A rank's mean per variant goes through one
// all-reduce MAX: a collective is as fast as its slowest rank. The best round of each counts
// (the least disturbed), as nccl-tests reports the time after warm-up; or, with --count mean,
// the mean of all rounds: what a training meets, where each all-reduce takes what it gets (on
// this 2-core virtual machine 2.1 MB between two ranks took 0.5 ms at best, 1.9 to 2.8 on average).
// With --compute-between-ms, each all-reduce follows that long a compute (untimed), as in a
// training step, where the all-reduce meets cores and caches the step has just used.
//
// Note [What is summed]
// By default each buffer holds zeros: they stay zeros however often they are summed, and summing
// float32 costs the same whatever the values (3.3 MB between two hosts at 1 Gbit/s: 27.7 to 28.3
// ms for zeros, 27.7 to 28.5 for random normal values; 2026-11-26). Float16 does not: Gloo sums
// it element by element through conversions whose cost depends on the value, slowest for
// float16's subnormals (below 6.1e-5). 1.65 MB took 14.5 to 15.9 ms as zeros, 17.0 to 18.4 as
// normal values of standard deviation 1e-2, 19.4 to 19.8 at 5e-4 and 2e-4, 21.3 to 23.8 at 1e-4.
// In a step (05 --comm-hook fp16 --one-bucket, after backward) the same 1.65 MB took 19.4 to
// 19.8 ms. --values gradients fills each rank's buffer with normal values of standard deviation
// 5e-4, the CNN's first gradients as --comm-hook fp16 sends them at world 2 (their standard
// deviation 1.1e-3, halved; Python's Cnn on Fashion-MNIST), a seed per rank, and puts them back
// before every all-reduce, untimed (summed in place, they would grow by the world size each time,
// and float16 would overflow).
std::pair<double, double> timed_round(ddp::Group& g, int iters, const std::function<void()>& plain,
                                      const std::function<void()>& ours, const std::function<void()>& between) {
  using clock = std::chrono::steady_clock;
  g.pg->barrier()->wait();
  double sum_plain = 0, sum_ours = 0;
  for (int i = 0; i < iters; ++i) {
    between();
    const auto t0 = clock::now();
    plain();
    const auto t1 = clock::now();
    between();
    const auto t2 = clock::now();
    ours();
    sum_plain += std::chrono::duration<double, std::micro>(t1 - t0).count();
    sum_ours += std::chrono::duration<double, std::micro>(clock::now() - t2).count();
  }
  std::vector<torch::Tensor> t{torch::tensor({sum_plain / iters, sum_ours / iters}, torch::kFloat64)};
  c10d::AllreduceOptions max_op;
  max_op.reduceOp = c10d::ReduceOp::MAX;
  g.pg->allreduce(t, max_op)->wait();
  return {t[0][0].item<double>(), t[0][1].item<double>()};
}


// Note [Measuring interference]
// How much an all-reduce and a compute slow each other when they run at once, the inputs of
// ddp_sim's --interference and --allreduce-slowdown (Note [Compute beside an all-reduce] in
// bench/ddp_sim.cpp), measured as Galvatron measures its overlap coefficient: compute alone,
// all-reduce alone, both together. Each round, after a barrier:
//   1. the all-reduce alone, waited for;
//   2. both: the all-reduce started (Gloo runs it on its own threads, as DDP's buckets run
//      while backward computes), and on this thread a compute (--compute: the MLP's first
//      layer's matmul, or the CNN's second convolution), chunk after chunk, each timed, until the all-reduce has completed (its future's
//      callback stamps the instant, on Gloo's thread); the chunk it completed in is dropped,
//      the others ran wholly beside it;
//   3. the compute alone: as many chunks again, each timed.
// s = (mean chunk beside) / (mean chunk alone) - 1, each rank's, then their mean; a = (the
// all-reduce beside) / (alone) - 1, each a mean over the rounds, the slowest rank's. A rank
// computes with the threads its launch gives it (05's rule: one each when several share a
// host), so run it as the training it stands for is run. Noise can make either slightly
// negative: printed as measured.
struct Interference {
  double chunk_alone_us = 0, chunk_beside_us = 0, allreduce_alone_us = 0, allreduce_beside_us = 0;
};
Interference measure_interference(ddp::Group& g, std::vector<torch::Tensor>& t, int rounds, const std::function<void()>& chunk,
                                  const std::function<void()>& put_back) {
  using clock = std::chrono::steady_clock;
  const auto us = [](clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); };
  double alone = 0, beside = 0, chunks_alone = 0, chunks_beside = 0;
  int64_t counted_alone = 0, counted_beside = 0;
  for (int r = 0; r < rounds; ++r) {
    put_back();
    g.pg->barrier()->wait();
    auto t0 = clock::now();
    g.pg->allreduce(t)->wait();
    alone += us(clock::now() - t0);
    put_back();
    g.pg->barrier()->wait();
    auto done = std::make_shared<std::atomic<int64_t>>(0);
    t0 = clock::now();
    auto work = g.pg->allreduce(t);
    work->getFuture()->addCallback([done](c10::ivalue::Future&) { done->store(clock::now().time_since_epoch().count()); });
    int64_t n = 0;
    while (done->load() == 0) {
      const auto c0 = clock::now();
      chunk();
      const auto c1 = clock::now();
      const int64_t end = done->load();
      if (end == 0 || end >= c1.time_since_epoch().count()) chunks_beside += us(c1 - c0), ++n;  // wholly beside it
    }
    work->wait();
    beside += us(clock::time_point(clock::duration(done->load())) - t0);
    counted_beside += n;
    for (int64_t k = 0; k < std::max<int64_t>(n, 8); ++k) {
      const auto c0 = clock::now();
      chunk();
      chunks_alone += us(clock::now() - c0), ++counted_alone;
    }
  }
  if (counted_beside == 0) {
    throw std::runtime_error("rank " + std::to_string(g.rank()) + ": --interference: the all-reduce ended before one chunk of compute; "
                             "give more bytes");
  }
  std::vector<torch::Tensor> m{torch::tensor({chunks_alone / counted_alone, chunks_beside / counted_beside}, torch::kFloat64)};
  g.pg->allreduce(m)->wait();  // SUM: the ranks' mean below
  std::vector<torch::Tensor> x{torch::tensor({alone / rounds, beside / rounds}, torch::kFloat64)};
  c10d::AllreduceOptions max_op;
  max_op.reduceOp = c10d::ReduceOp::MAX;
  g.pg->allreduce(x, max_op)->wait();
  return {m[0][0].item<double>() / g.size(), m[0][1].item<double>() / g.size(), x[0][0].item<double>(), x[0][1].item<double>()};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"allreduce_bench: all-reduce time by size, ours vs plain c10d"};
  ddp::CommonFlags flags;
  ddp::add_common_flags(app, flags);
  int64_t min_bytes = 4096, max_bytes = 64 << 20;
  int rounds = 5;
  int64_t round_bytes = 32 << 20;
  int64_t factor = 2;
  std::string csv, dtype = "float32", versus = "recorder", count = "best";
  app.add_option("--dtype", dtype, "What is summed: float32 (gradients), or float16/bfloat16 (what --comm-hook fp16/bf16 sends)")
      ->check(CLI::IsMember({"float32", "float16", "bfloat16"}));
  app.add_option("--min-bytes", min_bytes, "Smallest message")->check(CLI::Range(int64_t{4}, int64_t{1} << 32));
  app.add_option("--max-bytes", max_bytes, "Largest message; sizes grow by --factor from --min-bytes")
      ->check(CLI::Range(int64_t{4}, int64_t{1} << 32));
  app.add_option("--factor", factor, "Each size is this many times the last")->check(CLI::Range(int64_t{2}, int64_t{1} << 20));
  app.add_option("--versus", versus, "What c10d's plain all-reduce is timed against: recorder (ours: the same all-reduce "
                                     "through the flight recorder) or ring (chapter 03's ring all-reduce, from send/recv)")
      ->check(CLI::IsMember({"recorder", "ring"}));
  app.add_option("--rounds", rounds, "Rounds per size (--count says which counts)")->check(CLI::PositiveNumber);
  app.add_option("--count", count, "Which rounds count: best (the least disturbed, as nccl-tests) or mean (all of them: "
                                   "what a training meets)")
      ->check(CLI::IsMember({"best", "mean"}));
  app.add_option("--round-bytes", round_bytes, "Bytes all-reduced per round and variant (at least 2 all-reduces): less on a slow link")
      ->check(CLI::Range(int64_t{4}, int64_t{1} << 34));
  std::string values = "zeros";
  app.add_option("--values", values, "What each buffer holds: zeros, or gradients (normal values of a gradient's size, put back "
                                     "before each all-reduce: Note [What is summed])")
      ->check(CLI::IsMember({"zeros", "gradients"}));
  double between_ms = 0;
  app.add_option("--compute-between-ms", between_ms, "Before each all-reduce, compute this long, untimed (a matmul of "
                                                     "chapter 05's MLP's first layer, repeated): the all-reduce as a step meets it")
      ->check(CLI::Range(0.0, 1000.0));
  int64_t interference_bytes = 0;
  std::string beside = "matmul";
  app.add_option("--compute", beside, "With --interference, the compute beside the all-reduce: matmul (the MLP's first layer on 64 "
                                      "images) or conv (the CNN's second convolution on 8)")
      ->check(CLI::IsMember({"matmul", "conv"}));
  app.add_option("--interference", interference_bytes, "Instead of the sweep: compute and an all-reduce of this many bytes "
                                                        "beside each other, alone and together (Note [Measuring interference])")
      ->check(CLI::Range(int64_t{4}, int64_t{1} << 32));
  app.add_option("--csv", csv, "Rank 0 appends 'world,bytes,plain_us,ours_us' lines here (ours: --versus's)");
  ddp::parse_flags(app, argc, argv);

  return ddp::guarded_main([&] {
    if (min_bytes > max_bytes) throw ddp::UsageError("--min-bytes is larger than --max-bytes");
    std::optional<ddp::Group> joined = ddp::join_or_explain(flags);
    if (!joined) return ddp::kExitOk;
    ddp::Group& g = *joined;
    if (g.size() < 2) {
      throw ddp::UsageError("world size 1: an all-reduce needs a second rank to measure; start it under 02_spawn "
                            "(./build-cpu/02_spawn --nproc-per-node 2 -- ./build-cpu/allreduce_bench ...)");
    }
    ddp::FlightRecorder recorder(g);  // "ours" pays for recording, as every collective of 05 does
    std::ofstream out;
    if (g.rank() == 0 && !csv.empty()) {
      out.open(csv, std::ios::app);
      if (!out) throw ddp::UsageError("--csv: cannot append to " + csv);
    }
    const bool ring = versus == "ring";
    std::vector<ddp::cost::Point> c10d_points, ring_points;
    const bool best = count == "best";
    // The compute between: a step's worth of matmuls at one thread, for between_ms of the clock.
    const torch::Tensor x = torch::ones({64, 784}), w = torch::ones({784, 512});
    torch::Tensor gradients;  // --values gradients: what each all-reduce starts from
    std::vector<torch::Tensor> t;
    const auto between = [&] {
      if (gradients.defined()) t[0].copy_(gradients);
      const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double, std::milli>(between_ms);
      while (between_ms > 0 && std::chrono::steady_clock::now() < end) (void)torch::mm(x, w);
    };
    const auto type = dtype == "float32" ? torch::kFloat32 : dtype == "float16" ? torch::kHalf : torch::kBFloat16;
    const auto elements_of = [&](int64_t bytes) { return std::max<int64_t>(1, bytes / torch::elementSize(type)); };
    // Rank r's values: a seed of its own (Note [What is summed]).
    const auto values_of = [&](int r, int64_t elements) {
      torch::manual_seed(static_cast<uint64_t>(r) + 1);
      return (torch::randn({elements}) * 5e-4).to(type);
    };
    if (interference_bytes > 0) {  // Note [Measuring interference]
      const int64_t elements = elements_of(interference_bytes);
      gradients = values == "gradients" ? values_of(g.rank(), elements) : torch::zeros({elements}, type);
      t = {gradients.clone()};
      g.pg->allreduce(t)->wait();  // warm-up
      const torch::Tensor image = torch::ones({8, 32, 14, 14}), kernel = torch::ones({64, 32, 3, 3});
      const auto chunk = [&] { beside == "conv" ? (void)torch::conv2d(image, kernel, {}, 1, 1) : (void)torch::mm(x, w); };
      const Interference m = measure_interference(g, t, rounds, chunk, [&] { t[0].copy_(gradients); });
      char line[240];
      std::snprintf(line, sizeof(line), "interference, world %d, all-reduce of %lld B (%s, %s) beside a compute, %d rounds:", g.size(),
                    static_cast<long long>(interference_bytes), dtype.c_str(), values.c_str(), rounds);
      ddp::log0(line);
      std::snprintf(line, sizeof(line), "  compute: %.1f us a %s alone, %.1f us beside the all-reduce: interference s = %.3f",
                    m.chunk_alone_us, beside.c_str(), m.chunk_beside_us, m.chunk_beside_us / m.chunk_alone_us - 1);
      ddp::log0(line);
      std::snprintf(line, sizeof(line), "  all-reduce: %.1f us alone, %.1f us beside the compute: slowdown a = %.3f", m.allreduce_alone_us,
                    m.allreduce_beside_us, m.allreduce_beside_us / m.allreduce_alone_us - 1);
      ddp::log0(line);
      g.pg->barrier()->wait();
      return ddp::kExitOk;
    }
    for (int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= factor) {
      const int64_t elements = elements_of(bytes);
      if (values == "gradients") gradients = values_of(g.rank(), elements);
      t = {gradients.defined() ? gradients.clone() : torch::zeros({elements}, type)};
      // About --round-bytes moved per round and variant, at least 2 all-reduces: small sizes get many.
      const int iters = static_cast<int>(std::clamp<int64_t>(round_bytes / bytes, 2, 100));
      g.pg->allreduce(t)->wait();  // warm-up: Gloo sets up the pairs' buffers for this size
      double plain = best ? 1e300 : 0, ours = best ? 1e300 : 0;
      for (int r = 0; r < rounds; ++r) {
        const auto [p, o] = timed_round(g, iters, [&] { g.pg->allreduce(t)->wait(); }, [&] {
          if (ring) {
            ch03::ring_allreduce(*g.pg, t[0]);
          } else {
            ddp::run(g, "all-reduce", "bench", bytes, [&] { return g.pg->allreduce(t); });
          }
        }, between);
        if (best) plain = std::min(plain, p), ours = std::min(ours, o);
        else plain += p / rounds, ours += o / rounds;
      }
      if (gradients.defined()) {  // the last all-reduce summed what every rank put back: check it
        torch::Tensor sum = torch::zeros({elements});
        for (int r = 0; r < g.size(); ++r) sum += values_of(r, elements).to(torch::kFloat32);
        if (!torch::allclose(t[0].to(torch::kFloat32), sum, 1e-2, 1e-6)) {
          throw std::runtime_error("rank " + std::to_string(g.rank()) + ": the all-reduce of " + std::to_string(bytes) +
                                   " B is not the sum of the ranks' values");
        }
      }
      char line[200];
      if (ring) {
        std::snprintf(line, sizeof(line), "world %d %10lld B: c10d %.1f us, ring %.1f us, ring/c10d %.2f", g.size(),
                      static_cast<long long>(bytes), plain, ours, ours / plain);
        c10d_points.push_back({g.size(), static_cast<double>(bytes), plain * 1e-6});
        ring_points.push_back({g.size(), static_cast<double>(bytes), ours * 1e-6});
      } else {
        std::snprintf(line, sizeof(line), "world %d %10lld B: plain %.1f us, ours %.1f us, plain/ours %.2f", g.size(),
                      static_cast<long long>(bytes), plain, ours, plain / ours);
      }
      ddp::log0(line);
      if (out.is_open()) out << g.size() << "," << bytes << "," << plain << "," << ours << "\n" << std::flush;
    }
    // Note [The alpha-beta model of a ring all-reduce] (bench/alpha_beta.h), fitted to c10d's
    // times of this run: what a ring of these ranks should cost, against what both rings took.
    if (ring && c10d_points.size() >= 2) {
      const ddp::cost::AlphaBeta m = ddp::cost::fit(c10d_points);
      char line[200];
      std::snprintf(line, sizeof(line), "alpha-beta model fitted to the c10d times above: alpha %.1f us, beta %.3f ns/byte (%.1f MB/s)",
                    m.alpha * 1e6, m.beta * 1e9, 1e-6 / m.beta);
      ddp::log0(line);
      for (size_t k = 0; k < c10d_points.size(); ++k) {
        const double model = m.time(g.size(), c10d_points[k].bytes);
        std::snprintf(line, sizeof(line), "world %d %10lld B: model %.1f us; c10d/model %.2f, ring/model %.2f", g.size(),
                      static_cast<long long>(c10d_points[k].bytes), model * 1e6, c10d_points[k].seconds / model,
                      ring_points[k].seconds / model);
        ddp::log0(line);
      }
    }
    if (gradients.defined()) ddp::log0("--values gradients: each size's result was the sum of every rank's values");
    g.pg->barrier()->wait();
    return ddp::kExitOk;
  });
}
