// cost_model: fits the alpha-beta ring model to allreduce_bench's measurements, prints
// measured vs predicted for every point, then predicts DDP steps: for the bucket caps of a
// sweep (against the measured step, when given) and for a cluster you do not have.
//
// Usage (bench/cost_model.sh does all of it in one command):
//   ./build-cpu/cost_model --csv runs/cost/allreduce.csv
//   ./build-cpu/cost_model --csv runs/cost/allreduce.csv --trace runs/cost/trace.json \
//       --bucket-sweep 0.25,1,4,25 --nodes 4 --gpus-per-node 8 --intra-gbps 800 --inter-gbps 25
//   ./build-cpu/cost_model --csv runs/link/allreduce.csv --link 100mbit --trace runs/link/trace.json \
//       --compare buckets=330,one-bucket=360,fp16=180     # measured on links of a known rate (--link)
//   ./build-cpu/cost_model --csv runs/cost/allreduce.csv --param-mb 440 --forward-ms 60 --backward-ms 120 \
//       --bucket-cap-mb 25 --nodes 4 --gpus-per-node 8 --inter-gbps 25     # a model you have not traced
//
// Expected output: see bench/README.md (figures of the machine it runs on).

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <tuple>

#include "bench/alpha_beta.h"
#include "common/basics/cli.h"
#include "common/basics/errors.h"
#include "common/basics/failure.h"
#include "common/basics/log.h"
#include "common/hosts/simulated_hosts.h"
#include "common/observe/trace.h"

namespace {
using ddp::cost::Point;

// plain/ours of each point: our all-reduce (recorded, traced) against plain c10d's.
std::vector<double> g_plain_over_ours;

std::vector<Point> read_csv(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ddp::UsageError("--csv: cannot read " + path);
  std::vector<Point> points;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty() || line[0] == '#') continue;
    Point p;
    double plain = 0, ours = 0;
    char c1 = 0, c2 = 0, c3 = 0;
    std::istringstream s(line);
    if (!(s >> p.world >> c1 >> p.bytes >> c2 >> plain >> c3 >> ours) || c1 != ',' || c2 != ',' || c3 != ',' || p.world < 2 ||
        p.bytes <= 0 || !(ours > 0)) {
      throw ddp::UsageError(path + ":" + std::to_string(n) + ": expected 'world,bytes,plain_us,ours_us' with world >= 2");
    }
    p.seconds = ours / 1e6;  // the model describes the all-reduce DDP uses: ours
    if (plain > 0) g_plain_over_ours.push_back(plain / ours);
    points.push_back(p);
  }
  if (points.empty()) throw ddp::UsageError(path + ": no measurements");
  return points;
}

// What a 05_ddp --trace run says about one step on rank 0: mean durations of forward, backward's
// computing (backward minus its wait for all-reduces), optimizer, and the bytes all-reduced.
struct TracedStep {
  double forward_s = 0, backward_s = 0, optimizer_s = 0, grad_bytes = 0;
  int world = 0, steps = 0;
  std::vector<ddp::cost::Gradient> gradients;  // in ready order, each at its median time into backward
  // Ranks apart (Note [The slowest rank] in ddp_sim.cpp): where each rank's backward ends (its
  // last bucket ready), |rank a - rank b| over the steps and pairs of ranks; one host's clock.
  std::vector<double> apart_s;
};

// Each rank's backward ends (its last "bucketK ready" inside a backward span), in step order,
// the first two steps left out (buckets rebuilt, caches cold).
std::vector<double> ranks_apart(const std::map<int, std::vector<std::pair<double, double>>>& backwards,
                                const std::map<int, std::vector<double>>& bucket_ready) {
  std::vector<std::vector<double>> ends;
  for (const auto& [pid, spans] : backwards) {
    std::vector<double> e;
    const auto found = bucket_ready.find(pid);
    for (const auto& [begin, end] : spans) {
      double last = -1;
      if (found != bucket_ready.end())
        for (double ts : found->second) if (ts >= begin && ts <= end) last = std::max(last, ts);
      if (last >= 0) e.push_back(last);
    }
    if (e.size() > 2) ends.emplace_back(e.begin() + 2, e.end());
  }
  std::vector<double> apart;
  for (size_t a = 0; a < ends.size(); ++a)
    for (size_t b = a + 1; b < ends.size(); ++b)
      for (size_t i = 0; i < std::min(ends[a].size(), ends[b].size()); ++i) apart.push_back(std::fabs(ends[a][i] - ends[b][i]) / 1e6);
  return apart;
}

TracedStep read_trace(const std::string& path) {
  std::map<std::string, std::vector<double>> dur;  // rank 0's spans by name
  std::vector<std::tuple<double, int, double>> ready;  // rank 0's "gradient ready": time, param, bytes
  double bucket_bytes = 0;
  std::set<int> pids;
  std::map<int, std::vector<std::pair<double, double>>> backwards;  // every rank's: start, end (us)
  std::map<int, std::vector<double>> bucket_ready;                          // every rank's "bucketK ready"
  const std::regex bucket_ready_name("bucket[0-9]+ ready");
  for (const nlohmann::json& e : ddp::read_trace_events(path)) {
    const std::string name = e.value("name", ""), ph = e.value("ph", "");
    const double pid_value = ddp::event_number(e, "pid");
    if (name.empty() || std::isnan(pid_value)) continue;
    const int pid = static_cast<int>(pid_value);
    if (ph == "i" && pid == 0 && name == "gradient ready") {
      ready.emplace_back(ddp::event_number(e, "ts"), static_cast<int>(ddp::event_number(e, "param")), ddp::event_number(e, "bytes"));
    }
    if (ph == "i" && std::regex_match(name, bucket_ready_name)) bucket_ready[pid].push_back(ddp::event_number(e, "ts"));
    if (ph != "X") continue;
    pids.insert(pid);
    const double ts = ddp::event_number(e, "ts"), duration = ddp::event_number(e, "dur");
    if (name == "backward") backwards[pid].emplace_back(ts, ts + duration);
    if (pid != 0) continue;
    dur[name].push_back(duration / 1e6);
    if (name.rfind("all-reduce bucket", 0) == 0) bucket_bytes += ddp::event_number(e, "bytes");
  }
  TracedStep t;
  t.world = static_cast<int>(pids.size());
  t.steps = static_cast<int>(dur["backward"].size());
  if (t.steps < 3 || dur["forward"].empty() || dur["optimizer"].empty()) {
    throw ddp::UsageError("--trace " + path + ": not a 05_ddp --trace run of at least 3 steps");
  }
  // The median: the first steps (buckets rebuilt, caches cold) and validation do not count.
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
  };
  const std::vector<double>& bw = dur["backward"];
  const std::vector<double>& wait = dur["wait for all-reduces"];
  std::vector<double> computing;
  for (size_t i = 0; i < bw.size(); ++i) computing.push_back(bw[i] - (i < wait.size() ? wait[i] : 0));
  t.forward_s = median(dur["forward"]) + median(dur["data"]);
  t.backward_s = median(computing);
  t.optimizer_s = median(dur["optimizer"]);
  t.grad_bytes = bucket_bytes / t.steps;
  // Each gradient's time into its backward, the median over the steps, in the order of those.
  std::map<int, std::pair<double, std::vector<double>>> by_param;  // bytes, offsets (s)
  std::vector<std::pair<double, double>>& rank0 = backwards[0];
  std::sort(rank0.begin(), rank0.end());
  for (const auto& [ts, param, bytes] : ready) {
    auto it = std::upper_bound(rank0.begin(), rank0.end(), std::make_pair(ts, 1e300));
    if (it == rank0.begin() || ts > std::prev(it)->second) continue;
    auto& p = by_param[param];
    p.first = bytes;
    p.second.push_back((ts - std::prev(it)->first) / 1e6);
  }
  for (auto& [param, p] : by_param) t.gradients.push_back({p.first, median(p.second)});
  std::sort(t.gradients.begin(), t.gradients.end(), [](const auto& a, const auto& b) { return a.ready_s < b.ready_s; });
  t.apart_s = ranks_apart(backwards, bucket_ready);
  return t;
}

std::string ms(double s) {
  char b[32];
  std::snprintf(b, sizeof(b), "%.2f ms", s * 1e3);
  return b;
}

std::vector<double> parse_list(const std::string& flag, const std::string& text) {
  std::vector<double> v;
  std::stringstream s(text);
  std::string item;
  while (std::getline(s, item, ',')) {
    char* end = nullptr;
    const double x = std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0' || !(x > 0)) throw ddp::UsageError(flag + ": '" + item + "' is not a positive number");
    v.push_back(x);
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"cost_model: the alpha-beta model of all-reduce, fitted here, and the DDP steps it predicts"};
  ddp::show_true_defaults(app);  // Note [Help that tells the truth]
  std::string csv, trace, sweep, measured, measured_hidden, link, compare, csv_fp16;
  double bucket_cap_mb = 25, intra_gbps = 100, inter_gbps = 25;
  std::optional<double> latency_us, param_mb, forward_ms, backward_ms, optimizer_ms;
  int nodes = 4, gpus_per_node = 8;
  app.add_option("--csv", csv, "allreduce_bench's measurements (world,bytes,plain_us,ours_us)")->required();
  app.add_option("--trace", trace, "A merged 05_ddp --trace file: compute times and gradient bytes of its steps");
  app.add_option("--param-mb", param_mb, "Gradient megabytes of the step to predict [default: the traced run's]")->check(CLI::PositiveNumber);
  app.add_option("--forward-ms", forward_ms, "Forward (and data) time per step [default: the traced run's]")->check(CLI::NonNegativeNumber);
  app.add_option("--backward-ms", backward_ms, "Backward's computing time per step [default: the traced run's]")->check(CLI::PositiveNumber);
  app.add_option("--optimizer-ms", optimizer_ms, "Optimizer time per step [default: the traced run's, else 0]")->check(CLI::NonNegativeNumber);
  app.add_option("--bucket-cap-mb", bucket_cap_mb, "Bucket cap of the predicted step")->check(CLI::PositiveNumber);
  app.add_option("--bucket-sweep", sweep, "Predict the step for each of these caps (MiB, comma-separated)");
  app.add_option("--measured-ms", measured, "The measured step time for each cap of --bucket-sweep, same order");
  app.add_option("--measured-hidden", measured_hidden, "The measured overlap share (%) for each cap of --bucket-sweep, same order");
  app.add_option("--csv-fp16", csv_fp16, "allreduce_bench --dtype float16's measurements: the all-reduces of --compare fp16/bf16");
  app.add_option("--link", link, "The rate of the links --csv was measured on (02_spawn --link): how near the fitted beta comes to it");
  app.add_option("--compare", compare,
                 "Measured step times (ms) to predict: buckets=MS,one-bucket=MS,fp16=MS,bf16=MS (05 as traced, --one-bucket, --comm-hook)");
  app.add_option("--nodes", nodes, "What if: nodes")->check(CLI::PositiveNumber);
  app.add_option("--gpus-per-node", gpus_per_node, "What if: ranks per node")->check(CLI::PositiveNumber);
  app.add_option("--intra-gbps", intra_gbps, "What if: link speed within a node, Gb/s")->check(CLI::PositiveNumber);
  app.add_option("--inter-gbps", inter_gbps, "What if: link speed between nodes, Gb/s")->check(CLI::PositiveNumber);
  app.add_option("--latency-us", latency_us, "What if: per-step latency alpha, us [default: the fitted one]")->check(CLI::PositiveNumber);
  ddp::parse_flags(app, argc, argv);
  ddp::set_log_identity("cost_model");

  return ddp::guarded_main([&] {
    // 1. Measured vs model, point by point.
    const std::vector<Point> points = read_csv(csv);
    const ddp::cost::AlphaBeta m = ddp::cost::fit(points);
    std::printf("%5s %10s %12s %11s %11s %12s %8s\n", "world", "bytes", "time_us", "algbw_GB/s", "busbw_GB/s", "model_us", "error");
    std::vector<double> errors;
    for (const Point& p : points) {
      const double model = m.time(p.world, p.bytes);
      errors.push_back(std::fabs(model / p.seconds - 1));
      std::printf("%5d %10.0f %12.1f %11.3f %11.3f %12.1f %+7.1f%%\n", p.world, p.bytes, p.seconds * 1e6,
                  ddp::cost::algbw(p) / 1e9, ddp::cost::busbw(p) / 1e9, model * 1e6, (model / p.seconds - 1) * 100);
    }
    std::sort(errors.begin(), errors.end());
    std::printf("fitted ring model: alpha = %.1f us per step, beta = %.3f ns/byte (busbw limit 1/beta = %.2f GB/s); "
                "median |error| %.0f%%, worst %.0f%%\n",
                m.alpha * 1e6, m.beta * 1e9, 1 / m.beta / 1e9, errors[errors.size() / 2] * 100, errors.back() * 100);
    if (!link.empty()) {
      // busbw tends to 1/beta: the bytes per second each link carries, which the link's rate sets.
      const double configured = ddp::parse_link_rate(link) / 8, fitted = 1 / m.beta;
      std::printf("the link: configured %s = %.3f MB/s each way; the fit's 1/beta = %.3f MB/s: %+.1f%%\n",
                  ddp::describe_rate(configured * 8).c_str(), configured / 1e6, fitted / 1e6, (fitted / configured - 1) * 100);
    }
    if (!g_plain_over_ours.empty()) {
      double log_sum = 0;
      for (double r : g_plain_over_ours) log_sum += std::log(r);
      std::sort(g_plain_over_ours.begin(), g_plain_over_ours.end());
      std::printf("ours vs plain c10d all-reduce: plain/ours = %.3f (geometric mean of %zu points; lowest %.2f, highest %.2f)\n",
                  std::exp(log_sum / g_plain_over_ours.size()), g_plain_over_ours.size(), g_plain_over_ours.front(),
                  g_plain_over_ours.back());
    }
    const bool by_hand = param_mb && backward_ms;
    if (trace.empty() && !by_hand) {
      if (param_mb || forward_ms || backward_ms || optimizer_ms) throw ddp::UsageError("without --trace, give at least --param-mb and --backward-ms");
      return ddp::kExitOk;
    }

    // 2. A DDP step, predicted from compute times (a traced run's, or given by flag) and the fitted model.
    TracedStep t = trace.empty() ? TracedStep{} : read_trace(trace);
    if (trace.empty()) t.world = 2, t.steps = 0, trace = "the flags";
    if (param_mb || backward_ms) t.gradients.clear();  // a model by flag: gradients as a steady stream
    if (param_mb) t.grad_bytes = *param_mb * 1e6;
    if (forward_ms) t.forward_s = *forward_ms / 1e3;
    if (backward_ms) t.backward_s = *backward_ms / 1e3;
    if (optimizer_ms) t.optimizer_s = *optimizer_ms / 1e3;
    ddp::cost::StepPlan plan;
    plan.param_bytes = t.grad_bytes, plan.world = t.world;
    plan.forward_s = t.forward_s, plan.backward_s = t.backward_s, plan.optimizer_s = t.optimizer_s;
    plan.gradients = t.gradients;
    const std::string source = t.steps > 0 ? trace + " (rank 0, median of " + std::to_string(t.steps) + " traced steps)" : trace;
    std::printf("\nDDP step of %s: %.2f MB of gradients, forward+data %s, backward computing %s, optimizer %s, world %d\n",
                source.c_str(), t.grad_bytes / 1e6, ms(t.forward_s).c_str(), ms(t.backward_s).c_str(),
                ms(t.optimizer_s).c_str(), t.world);
    if (!t.apart_s.empty()) {
      std::vector<double> a = t.apart_s;
      std::sort(a.begin(), a.end());
      double sum = 0;
      for (double x : a) sum += x;
      const size_t pairs = static_cast<size_t>(t.world) * (t.world - 1) / 2;
      std::printf("ranks apart where backward ends (the last bucket ready), |rank a - rank b| over %zu step(s), %zu pair(s) of "
                  "ranks each: mean %.3f ms, median %.3f ms (ddp_sim --ranks-apart-ms: Note [The slowest rank])\n",
                  a.size() / std::max<size_t>(pairs, 1), pairs, sum / a.size() * 1e3, a[a.size() / 2] * 1e3);
    }
    if (!t.gradients.empty()) {
      std::printf("buckets cut from the %zu gradients in the order and at the times they became ready (median)\n", t.gradients.size());
    } else {
      std::printf("gradients as a steady stream over backward, buckets exactly their cap\n");
    }
    std::vector<double> caps = sweep.empty() ? std::vector<double>{bucket_cap_mb} : parse_list("--bucket-sweep", sweep);
    std::vector<double> got = measured.empty() ? std::vector<double>{} : parse_list("--measured-ms", measured);
    std::vector<double> hid = measured_hidden.empty() ? std::vector<double>{} : parse_list("--measured-hidden", measured_hidden);
    if (!got.empty() && got.size() != caps.size()) throw ddp::UsageError("--measured-ms needs one time per --bucket-sweep cap");
    if (!hid.empty() && hid.size() != caps.size()) throw ddp::UsageError("--measured-hidden needs one share per --bucket-sweep cap");
    std::printf("%10s %8s %12s %10s %8s %15s %14s %16s\n", "cap_MiB", "buckets", "all-reduce", "exposed", "hidden",
                "predicted_step", "measured_step", "measured_hidden");
    for (size_t i = 0; i < caps.size(); ++i) {
      plan.bucket_cap = caps[i] * (1 << 20);
      const auto s = ddp::cost::predict_step(m, plan);
      char h[16] = "-";
      if (!hid.empty()) std::snprintf(h, sizeof(h), "%.0f%%", hid[i]);
      std::printf("%10g %8d %12s %10s %7.0f%% %15s %14s %16s\n", caps[i], s.buckets, ms(s.comm_s).c_str(), ms(s.exposed_s).c_str(),
                  s.hidden_share() * 100, ms(s.step_s).c_str(), got.empty() ? "-" : ms(got[i] / 1e3).c_str(), h);
    }

    // 2b. Variants of the same step, predicted against their measured times: one bucket after
    //     backward (no overlap), and compression hooks that halve the bytes on the wire.
    if (!compare.empty()) {
      std::printf("\n");
      // with --csv-fp16 at the rate measured for them (Gloo sums 16-bit floats on the CPU slower
      // per byte than float32), else at float32's.
      const ddp::cost::AlphaBeta m16 = csv_fp16.empty() ? m : ddp::cost::fit(read_csv(csv_fp16));
      if (!csv_fp16.empty()) {
        std::printf("fitted to the float16 all-reduces (%s): alpha = %.1f us per step, beta = %.3f ns/byte\n", csv_fp16.c_str(),
                    m16.alpha * 1e6, m16.beta * 1e9);
      }
      std::printf("%-12s %8s %12s %10s %15s %14s %8s\n", "variant", "buckets", "all-reduce", "exposed", "predicted_step", "measured_step",
                  "error");
      std::stringstream items(compare);
      double worst = 0;
      for (std::string item; std::getline(items, item, ',');) {
        const size_t eq = item.find('=');
        const std::string name = item.substr(0, eq);
        const std::vector<double> got_ms = eq == std::string::npos ? std::vector<double>{} : parse_list("--compare " + name, item.substr(eq + 1));
        if (got_ms.size() != 1) throw ddp::UsageError("--compare: '" + item + "' is not NAME=MS");
        ddp::cost::StepPlan v = plan;
        v.bucket_cap = bucket_cap_mb * (1 << 20);
        if (name == "one-bucket") v.first_bucket = v.bucket_cap = INFINITY;
        else if (name == "fp16" || name == "bf16") v.wire_fraction = 0.5;  // half the bytes, summed as 16-bit floats:
        else if (name != "buckets") throw ddp::UsageError("--compare: '" + name + "': use buckets, one-bucket, fp16 or bf16");
        const auto s = ddp::cost::predict_step(v.wire_fraction < 1 && !csv_fp16.empty() ? m16 : m, v);
        const double error = s.step_s / (got_ms[0] / 1e3) - 1;
        worst = std::max(worst, std::fabs(error));
        std::printf("%-12s %8d %12s %10s %15s %14s %+7.1f%%\n", name.c_str(), s.buckets, ms(s.comm_s).c_str(), ms(s.exposed_s).c_str(),
                    ms(s.step_s).c_str(), ms(got_ms[0] / 1e3).c_str(), error * 100);
      }
      std::printf("largest |error| of the predicted steps: %.1f%%\n", worst * 100);
    }

    // 3. What if: the same model and compute on a cluster, its links given by flag.
    plan.world = nodes * gpus_per_node;
    plan.bucket_cap = bucket_cap_mb * (1 << 20);
    const auto c = ddp::cost::cluster(latency_us ? *latency_us / 1e6 : m.alpha, nodes, intra_gbps, inter_gbps);
    const auto s = ddp::cost::predict_step(c, plan);
    std::printf("\nwhat if: %d node(s) x %d ranks, %g Gb/s within a node, %g Gb/s between nodes, alpha %.1f us, cap %g MiB, "
                "the same compute per rank:\n  step %s: all-reduce %s in %d bucket(s), %s exposed (%.0f%% hidden)\n",
                nodes, gpus_per_node, intra_gbps, inter_gbps, c.alpha * 1e6, bucket_cap_mb, ms(s.step_s).c_str(),
                ms(s.comm_s).c_str(), s.buckets, ms(s.exposed_s).c_str(), s.hidden_share() * 100);
    return ddp::kExitOk;
  });
}
