// ddp_sim: one step of chapter 05's DDP simulated at any scale, from a model profile
// (bench/profile_model.py), the measured step time without DDP, a world and its network.
// See Note [What the simulator plays out] in bench/ddp_sim.cpp.
//
// Usage:
//   ./build-cpu/ddp_sim --profile bench/profiles/resnet50.json --compute-ms 97 --nodes 2 --gpus-per-node 8
//   ./build-cpu/ddp_sim --profile bench/profiles/resnet50.json --compute-ms 97 --nodes 128 --gpus-per-node 8 \
//       --algorithm hierarchical --intra-gbps 1000 --inter-gbps 400 --timeline
//   ./build-cpu/ddp_sim --model resnet50 --preset dgx-v100 --compute-ms 97 --nodes 2 --gpus-per-node 8
//   ./build-cpu/ddp_sim --table pytorch-dgx1     (against PyTorch's published table: bench/ddp_table.md)
//   ./build-cpu/ddp_sim --model resnet50 --preset dgx-v100 --compute-ms 97 --nodes 2 --gpus-per-node 8 --fsdp --prefetch 1
//       (one FSDP step instead, beside the same step under DDP: Note [An FSDP step])
//
// The network's defaults are placeholders, not the figures of any machine: give yours, or a
// --preset (Note [Presets: where each figure comes from] in bench/ddp_sim_presets.cpp).

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <vector>

#include "bench/ddp_sim.h"
#include "bench/fault_cost.h"
#include "bench/ddp_sim_presets.h"
#include "common/basics/cli.h"
#include "common/basics/errors.h"
#include "common/basics/failure.h"
#include "common/basics/log.h"

namespace {

std::string ms(double s) {
  char b[32];
  std::snprintf(b, sizeof(b), "%.3f ms", s * 1e3);
  return b;
}

const char* bucketing_name(ddp::sim::Bucketing b) {
  switch (b) {
    case ddp::sim::Bucketing::first_iteration: return "first iteration: one bucket in registration order";
    case ddp::sim::Bucketing::pytorch_1_4: return "PyTorch 1.4: cut in registration order, launched in reverse";
    default: return "rebuilt in the order gradients become ready (05 after its first step)";
  }
}

// Note [An FSDP step] in bench/ddp_sim.cpp: per unit, whether each all-gather ended before the
// unit needed it (the accounting question), the waits, the exposed communication, and the DDP
// step `ddp` beside it.
void print_fsdp(const ddp::sim::Profile& profile, const ddp::sim::FsdpResult& f, const ddp::sim::StepResult& ddp, int prefetch,
                int world_size, const ddp::sim::Options& o, bool measured) {
  std::printf("fsdp: %zu units (the layers with parameters, in forward order), resharded after forward; prefetch %d: when a unit "
              "starts, the all-gathers of the next %d are issued; one channel, collectives in the order issued\n",
              f.units.size(), prefetch, prefetch);
  std::printf("an all-gather or a reduce-scatter: half an all-reduce (%s)\n",
              measured ? "the preset's measured all-reduce, halved" : "the ring's W-1 steps of alpha + n/W over beta");
  std::printf("per unit, ms from the step's start: when it could start (need), when its all-gather ended (gathered), how long it "
              "waited, whether the all-gather ended in time; rs: its reduce-scatter's end\n");
  std::printf("%4s %-22s %8s | %9s %9s %8s %4s | %9s %9s %8s %4s | %9s\n", "unit", "layer", "MiB", "fwd need", "gathered", "wait", "ok",
              "bwd need", "gathered", "wait", "ok", "rs end");
  const auto in_time = [](const ddp::sim::FsdpGather& g) { return g.in_time() ? "yes" : "no"; };
  int forward_ok = 0, backward_ok = 0;
  std::string forward_late, backward_late;  // the first few units that waited, by name
  const auto late = [](std::string& list, const std::string& name, int count) {
    if (count < 5) list += (list.empty() ? "" : ", ") + name;
    if (count == 5) list += ", ...";
  };
  for (size_t u = 0; u < f.units.size(); ++u) {
    const auto& x = f.units[u];
    const std::string& name = profile.layers[x.layer].name;
    std::printf("%4zu %-22s %8.3f | %9.3f %9.3f %8.3f %4s | %9.3f %9.3f %8.3f %4s | %9.3f\n", u, name.c_str(),
                x.bytes / double(ddp::sim::kMiB), x.forward.need_s * 1e3, x.forward.end_s * 1e3, x.forward.wait_s() * 1e3,
                in_time(x.forward), x.backward.need_s * 1e3, x.backward.end_s * 1e3, x.backward.wait_s() * 1e3, in_time(x.backward),
                x.reduce_scatter_end_s * 1e3);
    if (!x.forward.in_time()) late(forward_late, name, static_cast<int>(u) - forward_ok);
    if (!x.backward.in_time()) late(backward_late, name, static_cast<int>(u) - backward_ok);
    forward_ok += x.forward.in_time(), backward_ok += x.backward.in_time();
  }
  const size_t n = f.units.size();
  std::printf("step: %s (FSDP)\n", ms(f.step_s).c_str());
  std::printf("forward: %d of %zu all-gathers ended before their unit needed it; the units waited %s in all%s%s\n", forward_ok, n,
              ms(f.forward_wait_s).c_str(), forward_late.empty() ? "" : "; late: ", forward_late.c_str());
  std::printf("backward: %d of %zu all-gathers ended before their unit needed it; the units waited %s in all%s%s\n", backward_ok, n,
              ms(f.backward_wait_s).c_str(), backward_late.empty() ? "" : "; late: ", backward_late.c_str());
  std::printf("all-gather: %s in all (2 per unit), reduce-scatter: %s (of the two, latency terms %s); exposed %s (waits before "
              "units %s + after backward %s)\n",
              ms(f.allgather_s).c_str(), ms(f.reduce_scatter_s).c_str(), ms(f.latency_s).c_str(), ms(f.exposed_comm_s).c_str(),
              ms(f.forward_wait_s + f.backward_wait_s).c_str(), ms(f.tail_s).c_str());
  std::printf("optimizer on the shard: %s (--optimizer-ms / %d ranks)\n", ms(f.optimizer_s).c_str(), world_size);
  if (f.interference_s > 0) std::printf("interference: compute %s longer beside the collectives\n", ms(f.interference_s).c_str());
  std::printf("step = forward %s + backward %s + exposed communication %s%s%s + optimizer %s\n", ms(f.forward_s).c_str(),
              ms(f.backward_compute_s).c_str(), ms(f.exposed_comm_s).c_str(), f.interference_s > 0 ? " + interference " : "",
              f.interference_s > 0 ? ms(f.interference_s).c_str() : "", ms(f.optimizer_s).c_str());
  std::printf("scaling efficiency: %.1f%% (compute without DDP / step: per GPU, against one GPU without DDP)\n", f.efficiency * 100);
  std::printf("DDP, the same step: %s (exposed all-reduce %s, optimizer %s on every rank); FSDP / DDP: %.3f\n", ms(ddp.step_s).c_str(),
              ms(ddp.exposed_comm_s).c_str(), ms(o.optimizer_s).c_str(), f.step_s / ddp.step_s);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ddp_sim: one DDP step simulated at any scale (bench/ddp_sim.cpp)"};
  ddp::show_true_defaults(app);  // Note [Help that tells the truth]
  std::string profile_path, model, profiles_dir, preset, table, algorithm = "ring", bucketing = "rebuilt";
  double optimizer_ms = 0, backward_ms = 0, intra_gbps = 100, inter_gbps = 25, intra_latency_us = 5, inter_latency_us = 10;
  double bucket_cap_mb = 25, first_bucket_mb = 1, per_param_us = 0, per_bucket_us = 0, copy_gb_per_s = 0;
  double interference = 0, allreduce_slowdown = 0, rank_spread = 0, ranks_apart_ms = 0;
  std::optional<double> compute_ms;  // required: no default to state
  int nodes = 1, gpus_per_node = 8;
  bool first_iteration = false, one_bucket = false, stop_vote = false, timeline = false;
  bool fsdp = false;
  int prefetch = 1;
  std::string comm_hook = "none", trace_path;
  std::optional<double> measured_ms;
  app.add_option("--profile", profile_path, "The model's profile (JSON, bench/profile_model.py)");
  app.add_option("--model", model, "Instead of --profile: bench/profiles/MODEL.json (resnet50, resnet101, cnn, ...)");
  app.add_option("--profiles-dir", profiles_dir, "Where --model looks (default: bench/profiles above this program)");
  app.add_option("--preset", preset, "A machine's network, cited figures: dgx-v100, a100-8 or h100-8 (an explicit flag wins)");
  app.add_option("--table", table, "Print a published benchmark against the simulator and exit: pytorch-dgx1, or pytorch-dgx1-held-out "
                                  "(with the slowest rank, its spread from the other model: Note [The PyTorch DGX-1 table, held out])");
  app.add_option("--compute-ms", compute_ms, "One step without DDP on one GPU: forward, backward, optimizer (required)")
      ->check(ddp::finite_number())->check(CLI::PositiveNumber);
  app.add_option("--optimizer-ms", optimizer_ms, "The part of --compute-ms after backward (runs after the all-reduces)")
      ->check(ddp::finite_number())->check(CLI::NonNegativeNumber);
  app.add_option("--backward-ms", backward_ms,
                 "The part of --compute-ms that is backward, measured (e.g. from 05's --trace); 0: the profile's FLOPs split it")
      ->check(ddp::finite_number())->check(CLI::NonNegativeNumber);
  app.add_option("--nodes", nodes, "Nodes")->check(CLI::PositiveNumber);
  app.add_option("--gpus-per-node", gpus_per_node, "GPUs (ranks) per node")->check(CLI::PositiveNumber);
  app.add_option("--intra-gbps", intra_gbps, "Within a node: Gb/s each GPU's link carries (a placeholder default)")
      ->check(ddp::finite_number())->check(CLI::PositiveNumber);
  app.add_option("--inter-gbps", inter_gbps, "Between nodes: Gb/s of one node's interfaces together (a placeholder default)")
      ->check(ddp::finite_number())->check(CLI::PositiveNumber);
  app.add_option("--intra-latency-us", intra_latency_us, "Within a node: latency of one step of a collective, us")
      ->check(ddp::finite_number())->check(CLI::NonNegativeNumber);
  app.add_option("--inter-latency-us", inter_latency_us, "Between nodes: latency of one step of a collective, us")
      ->check(ddp::finite_number())->check(CLI::NonNegativeNumber);
  app.add_option("--algorithm", algorithm, "ring (over all ranks) or hierarchical (Note [All-reduce across nodes])")
      ->check(CLI::IsMember({"ring", "hierarchical"}));
  app.add_option("--bucket-cap-mb", bucket_cap_mb, "Bucket cap, MiB")->check(ddp::finite_number())->check(CLI::PositiveNumber);
  app.add_option("--first-bucket-mb", first_bucket_mb, "The first bucket's limit, MiB")
      ->check(ddp::finite_number())->check(CLI::PositiveNumber);
  app.add_option("--bucketing", bucketing, "rebuilt, first-iteration or pytorch-1.4 (Note [Buckets as each DDP cuts them])")
      ->check(CLI::IsMember({"rebuilt", "first-iteration", "pytorch-1.4"}));
  app.add_flag("--first-iteration", first_iteration, "The first step: one bucket, no rebuild (--bucketing first-iteration)");
  app.add_flag("--one-bucket", one_bucket, "05's --one-bucket: every gradient in one bucket, all-reduced after backward (as --first-iteration)");
  app.add_option("--comm-hook", comm_hook, "none, or fp16: 05's --comm-hook fp16, half the bytes on the wire (Note [The wire and the cores])")
      ->check(CLI::IsMember({"none", "fp16"}));
  app.add_option("--interference", interference,
                 "Backward takes 1 + this times as long while an all-reduce runs beside it, measured: allreduce_bench --interference "
                 "(Note [Compute beside an all-reduce]); default 0, or the preset's")
      ->check(ddp::finite_number())->check(CLI::NonNegativeNumber);
  app.add_option("--allreduce-slowdown", allreduce_slowdown,
                 "An all-reduce takes 1 + this times as long while backward computes beside it, measured as --interference; default 0")
      ->check(ddp::finite_number())->check(CLI::NonNegativeNumber);
  app.add_option("--rank-spread", rank_spread,
                 "Each rank's compute a normal draw of this relative spread (0.02: 2 %); the step computes for the slowest "
                 "of the world's ranks (Note [The slowest rank]); default 0")
      ->check(ddp::finite_number())->check(CLI::Range(0.0, 0.99));
  app.add_option("--ranks-apart-ms", ranks_apart_ms,
                 "Instead of --rank-spread: how far apart two ranks end backward, the mean |difference| measured "
                 "(cost_model --trace on a two-rank trace); the spread it implies, sqrt(pi)/2 x this, over --compute-ms "
                 "(Note [The slowest rank]); default 0")
      ->check(ddp::finite_number())->check(CLI::NonNegativeNumber);
  app.add_flag("--stop-vote", stop_vote, "05's stop vote: a 4-byte all-reduce after every step, run during the next forward "
                                        "(Note [The wire and the cores]); PyTorch's DDP has none");
  app.add_option("--measured-ms", measured_ms, "A measured step to hold the prediction against: prints the error")
      ->check(ddp::finite_number())->check(CLI::PositiveNumber);
  app.add_option("--per-param-us", per_param_us, "DDP's cost per gradient's hook, us (Note [DDP's own costs])")
      ->check(ddp::finite_number())->check(CLI::NonNegativeNumber);
  app.add_option("--per-bucket-us", per_bucket_us, "DDP's cost per bucket's launch, us")->check(ddp::finite_number())->check(CLI::NonNegativeNumber);
  app.add_option("--copy-gb-per-s", copy_gb_per_s, "Copies into and out of buckets, GB/s; 0: free")
      ->check(ddp::finite_number())->check(CLI::NonNegativeNumber);
  app.add_flag("--fsdp", fsdp, "Simulate one FSDP step (ZeRO-3, PyTorch's fully_shard) instead, a unit per layer with parameters, "
                              "beside the same step under DDP (Note [An FSDP step])");
  app.add_option("--prefetch", prefetch, "With --fsdp: when a unit starts, issue the all-gathers of the next N units (forward and "
                                         "backward); 0: none")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--timeline", timeline, "Print each bucket (its gradients, bytes, ready, start and end) and where backward was slowed");
  app.add_option("--trace", trace_path, "Write the step as 05's --trace does, to open beside a measured one (Note [The simulated step as a trace])");
  // --faults: what faults cost at scale, restart against a quorum per step (bench/fault_cost.h).
  bool faults = false;
  ddp::sim::FaultInputs fi;
  double node_mtbf_hours = 0;
  app.add_flag("--faults", faults, "Instead of a step: the share of time lost to faults, checkpoint-and-restart at Young's "
                                   "interval against a quorum per step (Note [What faults cost at scale]); uses --nodes");
  app.add_option("--node-mtbf-hours", node_mtbf_hours, "--faults: one node's mean time between failures, hours")
      ->check(ddp::finite_number())->check(CLI::PositiveNumber);
  app.add_option("--checkpoint-s", fi.checkpoint_s, "--faults: seconds a checkpoint takes")->check(ddp::finite_number())->check(CLI::NonNegativeNumber);
  app.add_option("--restart-s", fi.restart_s, "--faults: seconds a restart takes (processes, the checkpoint loaded)")
      ->check(ddp::finite_number())->check(CLI::NonNegativeNumber);
  app.add_option("--step-s", fi.step_s, "--faults: seconds a training step takes")->check(ddp::finite_number())->check(CLI::PositiveNumber);
  app.add_option("--recovery-s", fi.recovery_s, "--faults: seconds from a failure to a new quorum's group (bench/recovery.sh measures it)")
      ->check(ddp::finite_number())->check(CLI::NonNegativeNumber);
  app.add_option("--quorum-s", fi.quorum_s, "--faults: seconds each step's question to the lighthouse adds")
      ->check(ddp::finite_number())->check(CLI::NonNegativeNumber);
  app.add_option("--replacement-s", fi.replacement_s, "--faults: seconds until a replacement has started and healed")
      ->check(ddp::finite_number())->check(CLI::NonNegativeNumber);
  app.add_option("--replica-groups", fi.replica_groups, "--faults: replica groups (each a part of the nodes)")->check(CLI::PositiveNumber);
  ddp::parse_flags(app, argc, argv);
  ddp::set_log_identity("ddp_sim");

  return ddp::guarded_main([&] {
    // 0. The table against PyTorch's published one (Note [The PyTorch DGX-1 table]).
    if (!table.empty()) {
      if (table != "pytorch-dgx1" && table != "pytorch-dgx1-held-out")
        throw ddp::UsageError("--table " + table + ": no such table; the tables are pytorch-dgx1, pytorch-dgx1-held-out");
      const std::string dir = profiles_dir.empty() ? ddp::sim::find_profiles_dir() : profiles_dir;
      std::fputs((table == "pytorch-dgx1" ? ddp::sim::pytorch_dgx1_table(dir) : ddp::sim::pytorch_dgx1_held_out_table(dir)).c_str(), stdout);
      return ddp::kExitOk;
    }
    // 0'. What faults cost (Note [What faults cost at scale] in bench/fault_cost.h).
    if (faults) {
      for (const char* needed : {"--node-mtbf-hours", "--step-s"})
        if (app.count(needed) == 0) throw ddp::UsageError(std::string("--faults needs ") + needed);
      fi.nodes = nodes, fi.node_mtbf_s = node_mtbf_hours * 3600;
      std::fputs(ddp::sim::describe_fault_cost(fi, ddp::sim::fault_cost(fi)).c_str(), stdout);
      return ddp::kExitOk;
    }
    // A preset fills the network flags not given explicitly (Note [Presets: where each figure comes from]);
    // its measured all-reduces within a node too, unless a flag says what the node's links are.
    std::vector<ddp::sim::MeasuredAllReduce> measured;
    if (!preset.empty()) {
      const ddp::sim::Preset& p = ddp::sim::find_preset(preset);
      if (app.count("--intra-gbps") == 0 && app.count("--intra-latency-us") == 0) measured = p.measured;
      if (app.count("--intra-gbps") == 0) intra_gbps = p.intra_gbps;
      if (app.count("--intra-latency-us") == 0) intra_latency_us = p.intra_latency_us;
      if (app.count("--inter-gbps") == 0) inter_gbps = p.inter_gbps;
      if (app.count("--inter-latency-us") == 0) inter_latency_us = p.inter_latency_us;
      if (app.count("--algorithm") == 0) algorithm = p.algorithm == ddp::sim::Algorithm::ring ? "ring" : "hierarchical";
      if (app.count("--interference") == 0) interference = p.interference;
    }
    if (profile_path.empty() == model.empty()) throw ddp::UsageError("--profile or --model: give one of them");
    if (!compute_ms) throw ddp::UsageError("--compute-ms is required: one step without DDP on one GPU, measured");
    if (!model.empty()) profile_path = ddp::sim::model_profile_path(profiles_dir.empty() ? ddp::sim::find_profiles_dir() : profiles_dir, model);
    ddp::sim::Profile profile;
    try {
      profile = ddp::sim::read_profile(profile_path);
    } catch (const ddp::UsageError& e) {
      throw ddp::UsageError(std::string("--profile ") + e.what());
    }
    if (app.count("--prefetch") > 0 && !fsdp) throw ddp::UsageError("--prefetch: only with --fsdp (the all-gathers issued ahead)");
    if (fsdp && allreduce_slowdown > 0) {
      throw ddp::UsageError("--allreduce-slowdown: not modelled with --fsdp (Note [An FSDP step]); --interference is");
    }
    if (optimizer_ms >= *compute_ms) throw ddp::UsageError("--optimizer-ms must be less than --compute-ms");
    if (backward_ms >= *compute_ms - optimizer_ms) throw ddp::UsageError("--backward-ms must be less than --compute-ms minus --optimizer-ms");
    // Note [The slowest rank]: E|a - b| = 2 sigma / sqrt(pi) for two normal draws.
    const double apart_sigma_ms = ranks_apart_ms * std::sqrt(M_PI) / 2;
    if (ranks_apart_ms > 0) {
      if (app.count("--rank-spread") > 0) throw ddp::UsageError("--ranks-apart-ms or --rank-spread: give one of them");
      rank_spread = apart_sigma_ms / *compute_ms;
      if (rank_spread >= 0.99) throw ddp::UsageError("--ranks-apart-ms: ranks that far apart are not a spread around --compute-ms");
    }
    const ddp::sim::World world{nodes, gpus_per_node};
    ddp::sim::Network net;
    net.intra = {intra_gbps * 1e9 / 8, intra_latency_us * 1e-6};
    net.inter = {inter_gbps * 1e9 / 8, inter_latency_us * 1e-6};
    net.algorithm = algorithm == "hierarchical" ? ddp::sim::Algorithm::hierarchical : ddp::sim::Algorithm::ring;
    net.measured = measured;
    ddp::sim::Options o;
    o.compute_s = *compute_ms / 1e3, o.optimizer_s = optimizer_ms / 1e3, o.backward_s = backward_ms / 1e3;
    o.bucket_cap_bytes = static_cast<size_t>(bucket_cap_mb * ddp::sim::kMiB);
    o.first_bucket_bytes = static_cast<size_t>(first_bucket_mb * ddp::sim::kMiB);
    if (o.bucket_cap_bytes == 0 || o.first_bucket_bytes == 0) throw ddp::UsageError("--bucket-cap-mb and --first-bucket-mb: at least one byte");
    o.bucketing = first_iteration || one_bucket || bucketing == "first-iteration" ? ddp::sim::Bucketing::first_iteration
                  : bucketing == "pytorch-1.4"                      ? ddp::sim::Bucketing::pytorch_1_4
                                                                    : ddp::sim::Bucketing::rebuilt;
    o.per_param_s = per_param_us * 1e-6, o.per_bucket_s = per_bucket_us * 1e-6, o.copy_bytes_per_s = copy_gb_per_s * 1e9;
    o.fp16_hook = comm_hook == "fp16", o.stop_vote = stop_vote;
    o.interference = interference, o.allreduce_slowdown = allreduce_slowdown, o.rank_spread = rank_spread;

    const auto t0 = std::chrono::steady_clock::now();
    const ddp::sim::StepResult r = ddp::sim::simulate(profile, world, net, o);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    // 1. What was simulated.
    double bytes = 0;
    for (const auto& p : profile.parameters) bytes += static_cast<double>(p.bytes);
    std::printf("model %s: %zu parameter tensors, %.2f MB of gradients, %zu layers%s%s\n", profile.model.c_str(), profile.parameters.size(),
                bytes / 1e6, profile.layers.size(), profile.source.empty() ? "" : "; from ", profile.source.c_str());
    if (!preset.empty()) std::printf("preset %s: %s\n", preset.c_str(), ddp::sim::find_preset(preset).machine.c_str());
    if (ddp::sim::measured_for(world, net)) {  // Note [Measured all-reduce tables]
      std::printf("world 1 node x %d GPUs = %d ranks; all-reduce as measured on %d GPUs of one node (the preset's table)\n",
                  gpus_per_node, world.size(), gpus_per_node);
    } else {
      std::printf("world %d node(s) x %d GPUs = %d ranks; %s all-reduce; within a node %g Gb/s, %g us; between nodes %g Gb/s, %g us\n",
                  nodes, gpus_per_node, world.size(), algorithm.c_str(), intra_gbps, intra_latency_us, inter_gbps, inter_latency_us);
    }
    std::printf("buckets: %s; first %g MiB, cap %g MiB: %zu bucket(s)%s\n", bucketing_name(o.bucketing), first_bucket_mb, bucket_cap_mb,
                r.buckets.size(), o.fp16_hook ? ", all-reduced as float16 (--comm-hook fp16)" : "");
    if (interference > 0 || allreduce_slowdown > 0) {
      std::printf("beside an all-reduce, backward takes %g times as long and an all-reduce beside backward %g times%s\n", 1 + interference,
                  1 + allreduce_slowdown, !preset.empty() && app.count("--interference") == 0 ? " (the preset's share, cited)" : "");
    }
    const double slower = o.compute_s > 0 ? (o.compute_s + r.slowest_rank_s) / o.compute_s : 1;  // the slowest rank's parts
    std::printf("compute without DDP (given): %s = forward %s + backward %s + optimizer %s (%s)\n", ms(o.compute_s).c_str(),
                ms(r.forward_s / slower).c_str(), ms(r.backward_compute_s / slower).c_str(), ms(o.optimizer_s).c_str(),
                o.backward_s > 0 ? "backward given; the profile's FLOPs divide it" : "split by the profile's FLOPs");

    // 2. FSDP instead (Note [An FSDP step]): its step, and the DDP step above beside it.
    if (fsdp) {
      const auto t1 = std::chrono::steady_clock::now();
      const ddp::sim::FsdpResult f = ddp::sim::simulate_fsdp(profile, world, net, o, prefetch);
      const double took_fsdp = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
      print_fsdp(profile, f, r, prefetch, world.size(), o, ddp::sim::measured_for(world, net) != nullptr);
      if (!trace_path.empty()) {
        std::ofstream out(trace_path);
        if (!(out << ddp::sim::trace_of_fsdp(profile, f).dump(1) << "\n")) throw ddp::UsageError("--trace: cannot write " + trace_path);
        std::printf("trace: %s (open it in ui.perfetto.dev)\n", trace_path.c_str());
      }
      std::printf("(simulated in %.3f ms, the DDP step in %.3f ms)\n", took_fsdp * 1e3, took * 1e3);
      return ddp::kExitOk;
    }

    // 3. The buckets, one by one.
    if (timeline) {
      std::printf("%6s %7s %10s %11s %11s %11s %12s %12s  %s\n", "bucket", "params", "MiB", "ready_ms", "start_ms", "end_ms",
                  "latency_ms", "bandwidth_ms", "first .. last gradient");
      for (size_t b = 0; b < r.buckets.size(); ++b) {
        const auto& k = r.buckets[b];
        std::printf("%6zu %7zu %10.3f %11.3f %11.3f %11.3f %12.3f %12.3f  %s .. %s\n", b, k.params.size(), k.bytes / double(ddp::sim::kMiB),
                    k.ready_s * 1e3, k.start_s * 1e3, k.end_s * 1e3, k.latency_s * 1e3, k.bandwidth_s * 1e3,
                    profile.parameters[k.params.front()].name.c_str(), profile.parameters[k.params.back()].name.c_str());
      }
      for (const auto& [a, b] : r.slowed) std::printf("backward slowed beside an all-reduce: %.3f .. %.3f ms\n", a * 1e3, b * 1e3);
    }

    // 4. The step.
    double latency = 0;
    for (const auto& k : r.buckets) latency += k.latency_s;
    latency += r.vote_latency_s;
    std::printf("step: %s\n", ms(r.step_s).c_str());
    std::printf("backward end: %s (forward, backward and DDP's hooks)\n", ms(r.backward_end_s).c_str());
    std::printf("all-reduce: %s in all (latency terms %s, bandwidth terms %s), exposed %s\n", ms(r.comm_s).c_str(), ms(latency).c_str(),
                ms(r.comm_s - latency).c_str(), ms(r.exposed_comm_s).c_str());
    if (o.stop_vote) std::printf("stop vote: %s (one all-reduce of 4 bytes; in the line above)\n", ms(r.vote_s).c_str());
    std::printf("overlap share: %.1f%% of the all-reduce hidden behind backward\n", r.overlap_share * 100);
    std::printf("DDP's own costs: %s (hooks, launches, copies)\n", ms(r.ddp_overhead_s).c_str());
    if (interference > 0 || allreduce_slowdown > 0) {  // what-if: the same step on engines of its own
      ddp::sim::Options apart = o;
      apart.interference = apart.allreduce_slowdown = 0;
      const double undisturbed = ddp::sim::simulate(profile, world, net, apart).step_s;
      std::printf("interference: compute %s longer beside the all-reduces; the step %s longer than with engines of its own (%s): "
                  "%.1f%% of the step\n", ms(r.interference_s).c_str(), ms(r.step_s - undisturbed).c_str(), ms(undisturbed).c_str(),
                  (r.step_s - undisturbed) / r.step_s * 100);
    }
    if (ranks_apart_ms > 0) {
      std::printf("ranks apart by %g ms (--ranks-apart-ms): a spread of %.3f ms, %.2f %% of the compute\n", ranks_apart_ms,
                  apart_sigma_ms, rank_spread * 100);
    }
    if (rank_spread > 0) {
      std::printf("the slowest of %d ranks (a spread of %g): the compute %s longer, %.3f x the spread (Note [The slowest rank])\n",
                  world.size(), rank_spread, ms(r.slowest_rank_s).c_str(), ddp::sim::expected_max_of_normals(world.size()));
    }
    std::printf("scaling efficiency: %.1f%% (compute without DDP / step: per GPU, against one GPU without DDP)\n", r.efficiency * 100);
    // The step is compute + exposed all-reduce + DDP's own costs + the compute's slowing beside
    // the all-reduces: which is the largest, and of what lies beyond the compute, which.
    const double exposed = r.exposed_comm_s, own = r.ddp_overhead_s, slowed = r.interference_s, slowest = r.slowest_rank_s;
    const double most = std::max({exposed, own, slowed, slowest});
    const char* largest = o.compute_s >= most ? "compute" : exposed == most ? "exposed all-reduce" : own == most ? "DDP's own costs"
                          : slowed == most ? "interference" : "the slowest rank";
    const char* beyond = r.step_s - o.compute_s < 1e-12 ? "none: the step is its compute"
                         : exposed == most ? (latency > r.comm_s - latency ? "exposed all-reduce, latency-bound" : "exposed all-reduce, bandwidth-bound")
                         : own == most     ? "DDP's own costs"
                         : slowed == most  ? "interference: compute slowed beside the all-reduces"
                                           : "the slowest rank's longer compute";
    std::printf("step = compute %s + exposed all-reduce %s + DDP's own costs %s%s%s%s%s; dominant term: %s\n", ms(o.compute_s).c_str(),
                ms(exposed).c_str(), ms(own).c_str(), slowed > 0 ? " + interference " : "", slowed > 0 ? ms(slowed).c_str() : "",
                slowest > 0 ? " + the slowest rank " : "", slowest > 0 ? ms(slowest).c_str() : "", largest);
    std::printf("beyond the compute: +%s, mostly %s\n", ms(r.step_s - o.compute_s).c_str(), beyond);
    if (measured_ms) {
      std::printf("measured: %.3f ms; predicted %s: %+.1f%%\n", *measured_ms, ms(r.step_s).c_str(), (r.step_s * 1e3 / *measured_ms - 1) * 100);
    }
    if (!trace_path.empty()) {
      std::ofstream out(trace_path);
      if (!(out << ddp::sim::trace_of(profile, r, o).dump(1) << "\n")) throw ddp::UsageError("--trace: cannot write " + trace_path);
      std::printf("trace: %s (open it in ui.perfetto.dev beside a measured one)\n", trace_path.c_str());
    }
    std::printf("(simulated in %.3f ms)\n", took * 1e3);
    return ddp::kExitOk;
  });
}
