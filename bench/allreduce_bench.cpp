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
//
// Expected output (rank 0; figures of the machine it runs on):
//   [rank 0/2] world 2       4096 B: plain 101.2 us, ours 103.9 us, plain/ours 0.97
//   ...
//   [rank 0/2] world 2   67108864 B: plain 81234.0 us, ours 80987.1 us, plain/ours 1.00
// With --versus ring (the table in bench/README.md):
//   [rank 0/3] world 3       4096 B: c10d 2544.6 us, ring 5005.8 us, ring/c10d 1.97
//   ...
//   [rank 0/3] alpha-beta model fitted to the c10d times above: alpha ..., beta ...
//   [rank 0/3] world 3       4096 B: model ... us; c10d/model ..., ring/model ...

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
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
  app.add_option("--csv", csv, "Rank 0 appends 'world,bytes,plain_us,ours_us' lines here (ours: --versus's)");
  ddp::parse_flags(app, argc, argv);

  return ddp::guarded_main([&] {
    if (min_bytes > max_bytes) throw ddp::UsageError("--min-bytes is larger than --max-bytes");
    std::optional<ddp::Group> joined = ddp::join_or_explain(flags);
    if (!joined) return ddp::kExitOk;
    ddp::Group& g = *joined;
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
    for (int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= factor) {
      const auto type = dtype == "float32" ? torch::kFloat32 : dtype == "float16" ? torch::kHalf : torch::kBFloat16;
      const int64_t elements = std::max<int64_t>(1, bytes / torch::elementSize(type));
      // Rank r's values: a seed of its own (Note [What is summed]).
      const auto values_of = [&](int r) {
        torch::manual_seed(static_cast<uint64_t>(r) + 1);
        return (torch::randn({elements}) * 5e-4).to(type);
      };
      if (values == "gradients") gradients = values_of(g.rank());
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
        for (int r = 0; r < g.size(); ++r) sum += values_of(r).to(torch::kFloat32);
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
