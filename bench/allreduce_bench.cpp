// allreduce_bench: all-reduce time by message size, ours (through the flight recorder, as DDP's
// buckets go) against a plain c10d Gloo all-reduce, measured in the same run. One process per
// rank, started by 02_spawn; rank 0 appends one CSV line per size for bench/cost_model.
//
// Usage (bench/cost_model.sh runs it at world sizes 2, 3 and 4):
//   ./build-cpu/02_spawn --nproc-per-node 2 -- ./build-cpu/allreduce_bench --csv runs/allreduce.csv
//
// Expected output (rank 0; figures of the machine it runs on):
//   [rank 0/2] world 2   4096 B: plain 101.2 us, ours 103.9 us, plain/ours 0.97
//   ...
//   [rank 0/2] world 2   64 MiB: plain 81234.0 us, ours 80987.1 us, plain/ours 1.00

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>

#include "common/basics/cli.h"
#include "common/basics/failure.h"
#include "common/observe/flight_recorder.h"
#include "common/basics/log.h"
#include "common/group/process_group.h"

namespace {

// Note [Timing a collective]
// A round starts after a barrier and runs `iters` pairs: one plain all-reduce, one of ours,
// each timed on its own, so that whatever disturbs the machine (on 2 cores, 4 ranks and their
// Gloo threads take turns) hits both alike. A rank's mean per variant goes through one
// all-reduce MAX: a collective is as fast as its slowest rank. The best round of each counts
// (the least disturbed), as nccl-tests reports the time after warm-up.
std::pair<double, double> timed_round(ddp::Group& g, int iters, const std::function<void()>& plain,
                                      const std::function<void()>& ours) {
  using clock = std::chrono::steady_clock;
  g.pg->barrier()->wait();
  double sum_plain = 0, sum_ours = 0;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = clock::now();
    plain();
    const auto t1 = clock::now();
    ours();
    sum_plain += std::chrono::duration<double, std::micro>(t1 - t0).count();
    sum_ours += std::chrono::duration<double, std::micro>(clock::now() - t1).count();
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
  std::string csv, dtype = "float32";
  app.add_option("--dtype", dtype, "What is summed: float32 (gradients), or float16/bfloat16 (what --comm-hook fp16/bf16 sends)")
      ->check(CLI::IsMember({"float32", "float16", "bfloat16"}));
  app.add_option("--min-bytes", min_bytes, "Smallest message")->check(CLI::Range(int64_t{4}, int64_t{1} << 32));
  app.add_option("--max-bytes", max_bytes, "Largest message; sizes double from --min-bytes")
      ->check(CLI::Range(int64_t{4}, int64_t{1} << 32));
  app.add_option("--rounds", rounds, "Rounds per size, the best counts")->check(CLI::PositiveNumber);
  app.add_option("--round-bytes", round_bytes, "Bytes all-reduced per round and variant (at least 2 all-reduces): less on a slow link")
      ->check(CLI::Range(int64_t{4}, int64_t{1} << 34));
  app.add_option("--csv", csv, "Rank 0 appends 'world,bytes,plain_us,ours_us' lines here");
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
    for (int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
      const auto type = dtype == "float32" ? torch::kFloat32 : dtype == "float16" ? torch::kHalf : torch::kBFloat16;
      const int64_t elements = std::max<int64_t>(1, bytes / torch::elementSize(type));
      std::vector<torch::Tensor> t{torch::zeros({elements}, type)};
      // About --round-bytes moved per round and variant, at least 2 all-reduces: small sizes get many.
      const int iters = static_cast<int>(std::clamp<int64_t>(round_bytes / bytes, 2, 100));
      g.pg->allreduce(t)->wait();  // warm-up: Gloo sets up the pairs' buffers for this size
      double plain = 1e300, ours = 1e300;
      for (int r = 0; r < rounds; ++r) {
        const auto [p, o] = timed_round(
            g, iters, [&] { g.pg->allreduce(t)->wait(); },
            [&] { ddp::run(g, "all-reduce", "bench", bytes, [&] { return g.pg->allreduce(t); }); });
        plain = std::min(plain, p), ours = std::min(ours, o);
      }
      char line[200];
      std::snprintf(line, sizeof(line), "world %d %10lld B: plain %.1f us, ours %.1f us, plain/ours %.2f", g.size(),
                    static_cast<long long>(bytes), plain, ours, plain / ours);
      ddp::log0(line);
      if (out.is_open()) out << g.size() << "," << bytes << "," << plain << "," << ours << "\n" << std::flush;
    }
    g.pg->barrier()->wait();
    return ddp::kExitOk;
  });
}
