// provides: the DDP step simulator of bench/ddp_sim (the profile reader, the all-reduce times,
// the buckets and the step's timeline), and an FSDP step on the same inputs (Note [An FSDP step]).
#include "bench/ddp_sim.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <stdexcept>

#include "05_ddp/buckets.h"  // assign_buckets: the course's own rule, not a copy of it
#include "common/basics/errors.h"

namespace ddp::sim {

// Note [What the simulator plays out]
// One training step of chapter 05's DDP (05_ddp/ddp.cpp) on one rank: forward, then backward
// layer by layer in reverse, each gradient's hook copying it into its bucket, each full bucket's
// all-reduce launched in bucket order, queued behind the one before (one communication stream,
// as NCCL's and 05's), the wait for the last, the copy back, the optimizer. Every rank runs the
// same model on the same batch size, so every rank's timeline is the same: a synchronous
// all-reduce ends for all ranks at once, and one rank stands for all. What the world size
// changes is only what each all-reduce costs (Note [All-reduce across nodes]); the simulation
// is O(parameters + buckets) at any world size, 1,024 GPUs as fast as 2. It is deterministic:
// no randomness, no clock, events in a fixed order. The contention between the all-reduce and
// backward for SMs, memory or cores is an input (Note [Compute beside an all-reduce]), and so is
// the spread of the ranks' speeds, whose slowest sets the step's compute (Note [The slowest
// rank]). Not modelled (yet): jitter from step to step, NCCL's tree algorithm, several
// communication streams.
//
// Note [Splitting the compute]
// The input is the measured time of one step without DDP on one GPU (compute_s: a table's
// "no ddp" column, or a run measured here), not FLOPs times a peak rate: the profile's FLOPs only
// say how that time divides. optimizer_s (default 0) is taken off first: it runs after the
// all-reduces. The rest is forward and backward in proportion to the sums of forward_flops and
// backward_flops over the layers, unless backward's part was measured too (backward_s, from a
// trace: on this course's 2-core machine the CNN's backward takes about as long as its forward,
// not the twice its FLOPs say), and backward's share is divided among the layers by their
// backward_flops; a layer's backward time is its share, whatever its kind (a memory-bound
// BatchNorm gets less time than it takes, a matmul more: the profile cannot say better).
// Backward runs the layers in reverse forward order; a parameter's gradient is ready when its
// layer's backward ends, and a layer's gradients fire their hooks in reverse registration order
// (NOTES: hooks fire in reverse parameter order; 05's log shows a Conv2d's weight before its
// bias, which moves a parameter across a bucket boundary at most: both are ready at the same
// instant). A layer listed twice (used twice in forward) produces its gradients at the end of the
// backward of its first use, the last to run.

// Note [Buckets as each DDP cuts them]
// rebuilt (05 after its first step, PyTorch >= 1.5): assign_buckets over the order the gradients
//   become ready, the first bucket closed at 1 MiB, the others at the cap (Note [Buckets],
//   Note [Rebuilding the buckets] in 05_ddp/ddp.cpp, whose function this calls).
// first_iteration (05's and PyTorch's first step): one bucket of every parameter in
//   registration order, launched when backward has ended: no overlap.
// pytorch_1_4 (the PyTorch of benchmarks/distributed/ddp/README.md's table): no rebuild. Its
//   distributed.py cuts buckets once, in registration order, "a single small bucket for
//   parameters that are defined first" (1 MiB) and then the cap, and hands the reducer the list
//   reversed ("approximate the order in which their gradients are produced"). So the small
//   bucket holds the first layers and is the last launched; the first launched is whatever the
//   cap left at the end of the registration order. The same closing rule (a bucket closes once
//   it holds at least its limit): assign_buckets over registration order, the result reversed.
//
// Note [DDP's own costs]
// What DDP adds to a step besides the all-reduces, each on the critical path: per gradient a
// hook (per_param_s: the autograd hook, its bookkeeping, the launch of its copy) and the copy of
// its bytes into the bucket (bytes / copy_bytes_per_s), both between its layer's backward and
// the next layer's; per bucket the launch of its all-reduce (per_bucket_s), before the all-reduce
// starts and before backward goes on; after the last all-reduce, the copy of every bucket back
// into the gradients (all bytes / copy_bytes_per_s). None of these is measured in a table's
// multi-GPU cells: per_param_s is to be calibrated from the 1-GPU columns only (DDP at one GPU
// minus no DDP: there is no communication at world 1), never fitted to the cells it is judged on.
//
// Note [The wire and the cores]
// fp16_hook (05's --comm-hook fp16, PyTorch's fp16_compress_hook): a bucket is cut by its
//   float32 bytes, as 05 cuts it, and all-reduced as float16: half the bytes on the wire, the
//   same number of steps (latencies). The casts either side are not modelled (one pass over the
//   bucket's memory: small beside a network, not beside loopback).
// stop_vote: 05 posts a 4-byte all-reduce after every step, chapter 06's vote on stopping
//   together (Note [Stopping together without a sync per step], common/slurm/stop_vote.cpp), and
//   reads it at the end of the next step: it runs beside that whole step, on a thread of
//   Gloo's own (so it does not queue before the buckets), slowed beside the compute by the
//   all-reduce's slowdown and slowing the compute by the interference while it runs (Note
//   [Compute beside an all-reduce]); the step waits only for what of it outlasts the step.
//   PyTorch's DDP has no such vote (the DGX-1 table).
//
// Note [Compute beside an all-reduce]
// An all-reduce that hides behind backward is not free. NCCL's kernels hold SMs while they run
// and move every byte through the GPU's memory, which backward's kernels use too; Gloo sums and
// copies on the CPU's cores, which backward computes on (two ranks of one thread each on a
// 2-core laptop leave it no core of its own). So both slow down while they run together, by
// shares the simulator takes as inputs, measured apart from the step they predict:
//   interference, s: a stretch of backward that would take d alone takes d (1 + s) while an
//     all-reduce runs. The all-reduces run one after the other from their start until the link
//     is free, so from any instant of backward the time they still run is one window: what of
//     d fits in it at the slow rate, and the rest after it.
//   allreduce_slowdown, a: an all-reduce takes (1 + a) times its time alone while backward
//     computes; what is left of it when backward ends runs at full speed.
// DDP's hooks and launches are not slowed (on a GPU they run on the CPU). s = a = 0 is the
// undisturbed step of the other Notes, bit for bit; s without bound stops backward while any
// all-reduce runs. On this course's machine both are measured by allreduce_bench --interference
// (compute alone, all-reduce alone, both at once: Note [Measuring interference] there), in the
// command that measures the link; Galvatron measures its "overlap coefficient" (1.1-1.3) the same
// way, with a matrix multiply beside an all-reduce; Calculon takes a share of the processor per
// network (0.15 NVLink, 0.02 InfiniBand). The presets' share is cited (Note [Presets: where each
// figure comes from]).

namespace {

[[noreturn]] void bad(const std::string& where, const std::string& what) { throw UsageError(where + ": " + what); }

const nlohmann::json& field(const nlohmann::json& object, const char* key, const std::string& where, const std::string& path) {
  if (!object.is_object()) bad(where, path + " is not an object");
  auto it = object.find(key);
  if (it == object.end()) bad(where, path + " has no \"" + key + "\"");
  return *it;
}
std::string text(const nlohmann::json& object, const char* key, const std::string& where, const std::string& path) {
  const nlohmann::json& v = field(object, key, where, path);
  if (!v.is_string()) bad(where, path + "." + key + " is not a string");
  return v.get<std::string>();
}
double number(const nlohmann::json& object, const char* key, const std::string& where, const std::string& path) {
  const nlohmann::json& v = field(object, key, where, path);
  if (!v.is_number() || !(v.get<double>() >= 0)) bad(where, path + "." + key + " is not a number >= 0");
  return v.get<double>();
}

// Each layer's parameters (registration order), by the layer's first occurrence in forward.
std::vector<std::vector<size_t>> params_by_layer(const Profile& profile) {
  std::map<std::string, size_t> first;
  for (size_t l = 0; l < profile.layers.size(); ++l) first.emplace(profile.layers[l].name, l);
  std::vector<std::vector<size_t>> by_layer(profile.layers.size());
  for (size_t i = 0; i < profile.parameters.size(); ++i) {
    auto it = first.find(profile.parameters[i].layer);
    if (it == first.end()) {
      throw std::invalid_argument("parameter " + profile.parameters[i].name + ": no layer \"" + profile.parameters[i].layer + "\"");
    }
    by_layer[it->second].push_back(i);
  }
  return by_layer;
}

// A flat ring across nodes: every step waits for its slowest hop (Note [All-reduce across nodes]).
Link slowest_link(const Network& net) {
  return {std::min(net.intra.bytes_per_s, net.inter.bytes_per_s), std::max(net.intra.latency_s, net.inter.latency_s)};
}

void check_link(const Link& link, const std::string& name) {
  if (!(link.bytes_per_s > 0)) throw std::invalid_argument(name + " bandwidth must be > 0");
  if (!(link.latency_s >= 0)) throw std::invalid_argument(name + " latency must be >= 0");
}

}  // namespace

Profile parse_profile(const nlohmann::json& j, const std::string& where) {
  Profile p;
  p.model = text(j, "model", where, "the profile");
  if (j.is_object() && j.contains("source") && j["source"].is_string()) p.source = j["source"].get<std::string>();
  const nlohmann::json& params = field(j, "parameters", where, "the profile");
  const nlohmann::json& layers = field(j, "layers", where, "the profile");
  if (!params.is_array() || params.empty()) bad(where, "\"parameters\" is not a non-empty array");
  if (!layers.is_array() || layers.empty()) bad(where, "\"layers\" is not a non-empty array");
  for (size_t l = 0; l < layers.size(); ++l) {
    const std::string path = "layers[" + std::to_string(l) + "]";
    Profile::Layer layer;
    layer.name = text(layers[l], "name", where, path);
    if (layers[l].contains("type") && layers[l]["type"].is_string()) layer.type = layers[l]["type"].get<std::string>();
    layer.forward_flops = number(layers[l], "forward_flops", where, path);
    layer.backward_flops = number(layers[l], "backward_flops", where, path);
    p.layers.push_back(layer);
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string path = "parameters[" + std::to_string(i) + "]";
    Profile::Parameter q;
    q.name = text(params[i], "name", where, path);
    q.layer = text(params[i], "layer", where, path);
    q.numel = static_cast<int64_t>(number(params[i], "numel", where, path));
    q.bytes = static_cast<size_t>(number(params[i], "bytes", where, path));
    p.parameters.push_back(q);
  }
  try {
    params_by_layer(p);  // every parameter names a layer of the profile
  } catch (const std::invalid_argument& e) {
    bad(where, e.what());
  }
  double flops = 0;
  for (const auto& l : p.layers) flops += l.forward_flops + l.backward_flops;
  if (!(flops > 0)) bad(where, "the layers have no FLOPs: nothing to divide the compute time by");
  return p;
}

Profile read_profile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UsageError(path + ": cannot read the profile");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw UsageError(path + ": not JSON: " + e.what());
  }
  return parse_profile(j, path);
}

// Note [All-reduce across nodes]
// A ring over p ranks (bench/alpha_beta.h's Note [The alpha-beta model of a ring all-reduce]):
// a reduce-scatter and an all-gather, 2(p-1) steps of n/p bytes,
//     ring(p, n) = 2(p-1) alpha + 2(p-1)/p n / B.
// ring over all ranks: every step waits for its slowest hop. Across nodes that is the hop
//   between nodes: alpha = the larger latency, B = the smaller bandwidth, where the inter-node
//   bandwidth is all of a node's interfaces together (the ring leaves each node once, and NCCL
//   spreads its channels over the interfaces). At 1,024 ranks the 2(p-1) latencies dominate
//   a small bucket: the reason for the next.
// hierarchical (g GPUs per node, N nodes): reduce-scatter within the node, each GPU then holding
//   the node's sum of n/g bytes; g rings across the nodes at once (one per local rank) each
//   all-reduce their n/g bytes, sharing the node's inter-node bandwidth B_e, so each gets B_e/g;
//   then an all-gather within the node. The halves of a ring are half of ring():
//     (g-1) a_i + (g-1)/g n/B_i                    reduce-scatter in the node
//   + 2(N-1) a_e + 2(N-1)/N (n/g) / (B_e/g)        = 2(N-1) a_e + 2(N-1)/N n/B_e
//   + (g-1) a_i + (g-1)/g n/B_i                    all-gather in the node.
//   At N = 1 it is ring(g) within the node, at g = 1 ring(N) between nodes. It pays 2(g-1) +
//   2(N-1) latencies instead of 2(Ng-1), and sends over the slow links 2(N-1)/N n per node
//   where the flat ring sends 2(Ng-1)/(Ng) n through each node's interfaces: a little less.
//   (NCCL 2.4+ also has a tree between nodes, log N latencies: not modelled yet.)

CollectiveTime ring_allreduce(int ranks, double bytes, const Link& link) {
  if (ranks < 1) throw std::invalid_argument("a ring needs at least one rank");
  const double steps = 2.0 * (ranks - 1);
  return {steps * link.latency_s, steps / ranks * bytes / link.bytes_per_s};
}

// Note [Measured all-reduce tables]
// A node's GPUs are not all linked alike: in a DGX-1's hybrid cube-mesh GPU 0 and GPU 1 share one
// NVLink, GPU 0 has two to GPU 3 and to GPU 4, so a ring over 2 GPUs has 25 GB/s where one over
// 8 has nearer the six links' 150 (PyTorch's benchmarks/distributed/ddp/README.md prints that
// machine's `nvidia-smi topo -m`). No single link figure fits every world, so a preset may carry,
// per GPU count, an all-reduce measured on such a node, and a world of one node of that many
// GPUs takes its time from the table instead of from the ring formula. Between two rows the time
// is read on the straight line through them; outside the rows, on the line through the nearest
// two. NCCL changes protocol and channels with the size, so a table is not smooth (8 V100s: 13
// MiB in 313 us, 14 MiB in 256 us): the rows keep those steps. The latency term is where the
// first two rows' line meets 0 bytes, the rest is the bandwidth term. A world of several nodes
// still takes the ring or hierarchical formula (Note [All-reduce across nodes]).
CollectiveTime interpolate(const MeasuredAllReduce& table, double bytes) {
  const auto& r = table.rows;
  if (r.size() < 2) throw std::invalid_argument("a measured all-reduce table needs two rows at least");
  for (size_t k = 1; k < r.size(); ++k) {
    if (!(r[k].first > r[k - 1].first)) throw std::invalid_argument("a measured all-reduce table's bytes must increase");
  }
  size_t k = 1;
  while (k + 1 < r.size() && r[k].first < bytes) ++k;
  const auto line = [&](size_t a, double x) { return r[a].second + (x - r[a].first) * (r[a + 1].second - r[a].second) / (r[a + 1].first - r[a].first); };
  const double total = std::max(0.0, line(k - 1, bytes));
  const double latency = std::min(total, std::max(0.0, line(0, 0)));
  return {latency, total - latency};
}

const MeasuredAllReduce* measured_for(const World& world, const Network& net) {
  if (world.nodes != 1) return nullptr;
  for (const MeasuredAllReduce& table : net.measured) {
    if (table.gpus == world.gpus_per_node) return &table;
  }
  return nullptr;
}

CollectiveTime allreduce(const World& world, const Network& net, double bytes) {
  const int g = world.gpus_per_node, n = world.nodes;
  if (const MeasuredAllReduce* table = measured_for(world, net)) return interpolate(*table, bytes);
  if (n == 1) return ring_allreduce(g, bytes, net.intra);
  if (net.algorithm == Algorithm::ring) {
    return ring_allreduce(world.size(), bytes, g == 1 ? net.inter : slowest_link(net));
  }
  const CollectiveTime in_node = ring_allreduce(g, bytes, net.intra);  // its halves: reduce-scatter + all-gather
  const CollectiveTime across = ring_allreduce(n, bytes, net.inter);   // n/g bytes at B_e/g: the same time as n at B_e
  return {in_node.latency_s + across.latency_s, in_node.bandwidth_s + across.bandwidth_s};
}

// The halves of allreduce(), for an FSDP step (Note [An FSDP step]): its cases one by one, each
// term half of the all-reduce's (so that an all-gather and a reduce-scatter add up to it, to the
// last bit: halving a double is exact).
CollectiveTime ring_half(int ranks, double bytes, const Link& link) {
  if (ranks < 1) throw std::invalid_argument("a ring needs at least one rank");
  const double steps = ranks - 1.0;
  return {steps * link.latency_s, steps / ranks * bytes / link.bytes_per_s};
}

CollectiveTime half_allreduce(const World& world, const Network& net, double bytes) {
  const int g = world.gpus_per_node, n = world.nodes;
  if (const MeasuredAllReduce* table = measured_for(world, net)) {  // an all-reduce measured: halved
    const CollectiveTime all = interpolate(*table, bytes);
    return {all.latency_s / 2, all.bandwidth_s / 2};
  }
  if (n == 1) return ring_half(g, bytes, net.intra);
  if (net.algorithm == Algorithm::ring) return ring_half(world.size(), bytes, g == 1 ? net.inter : slowest_link(net));
  // hierarchical: the reduce-scatter in the node, then the one across nodes (n/g bytes at B_e/g).
  const CollectiveTime in_node = ring_half(g, bytes, net.intra), across = ring_half(n, bytes, net.inter);
  return {in_node.latency_s + across.latency_s, in_node.bandwidth_s + across.bandwidth_s};
}

std::vector<size_t> ready_order(const Profile& profile) {
  const auto by_layer = params_by_layer(profile);
  std::vector<size_t> order;
  for (auto l = by_layer.rbegin(); l != by_layer.rend(); ++l) order.insert(order.end(), l->rbegin(), l->rend());
  return order;
}

std::vector<std::vector<size_t>> bucket_assignment(const Profile& profile, const Options& options) {
  std::vector<size_t> sizes, registration;
  for (size_t i = 0; i < profile.parameters.size(); ++i) sizes.push_back(profile.parameters[i].bytes), registration.push_back(i);
  switch (options.bucketing) {
    case Bucketing::first_iteration:
      return assign_buckets(registration, sizes, kOneBucket, kOneBucket);
    case Bucketing::pytorch_1_4: {
      auto buckets = assign_buckets(registration, sizes, options.first_bucket_bytes, options.bucket_cap_bytes);
      std::reverse(buckets.begin(), buckets.end());
      return buckets;
    }
    case Bucketing::rebuilt:
    default:
      return assign_buckets(ready_order(profile), sizes, options.first_bucket_bytes, options.bucket_cap_bytes);
  }
}

namespace {

// The inputs every step needs, DDP's or FSDP's.
void check_compute(const World& world, const Options& options) {
  if (world.nodes < 1 || world.gpus_per_node < 1) throw std::invalid_argument("the world needs at least one node of one GPU");
  if (!(options.compute_s > 0)) throw std::invalid_argument("the compute time must be > 0");
  if (!(options.optimizer_s >= 0 && options.optimizer_s < options.compute_s)) {
    throw std::invalid_argument("the optimizer time must be >= 0 and less than the compute time");
  }
  if (!(options.backward_s >= 0 && options.backward_s < options.compute_s - options.optimizer_s)) {
    throw std::invalid_argument("the backward time must be >= 0 and less than the compute time without the optimizer");
  }
}
void check_links(const World& world, const Network& net) {
  if (world.gpus_per_node > 1) check_link(net.intra, "the intra-node link's");
  if (world.nodes > 1) check_link(net.inter, "the inter-node link's");
}

// Forward's and backward's parts of the compute, and the FLOPs that divide them among the layers
// (Note [Splitting the compute]).
struct Passes {
  double forward_flops = 0, backward_flops = 0, forward_s = 0, backward_s = 0;
};
Passes split_passes(const Profile& profile, const Options& options) {
  Passes p;
  for (const auto& l : profile.layers) p.forward_flops += l.forward_flops, p.backward_flops += l.backward_flops;
  if (!(p.forward_flops + p.backward_flops > 0)) throw std::invalid_argument("the profile has no FLOPs");
  const double passes = options.compute_s - options.optimizer_s;
  p.forward_s = options.backward_s > 0 ? passes - options.backward_s : passes * p.forward_flops / (p.forward_flops + p.backward_flops);
  p.backward_s = passes - p.forward_s;
  return p;
}

// `d` of compute from `now`, slowed while a collective runs, until `busy_until` (Note [Compute
// beside an all-reduce]): the collectives run one after the other from their start until the
// link is free, so what is left of them from `now` is one window. Returns when the compute ends.
double compute_beside(double now, double d, double busy_until, double interference, std::vector<std::pair<double, double>>& slowed,
                      double& interference_s) {
  const double busy = busy_until - now;
  if (interference == 0 || busy <= 0) return now + d;
  const double slow = 1 + interference;
  const double took = d * slow <= busy ? d * slow : busy + (d - busy / slow);
  slowed.emplace_back(now, now + std::min(took, busy));
  interference_s += took - d;
  return now + took;
}

}  // namespace

// Note [The slowest rank]
// Every rank waits at the step's all-reduces for the others, so the step computes as long as the
// slowest rank does. GPUs of one model differ in speed, and persistently, across the GPUs of a
// cluster, from manufacturing variability and power management (Sinha et al.,
// "Not All GPUs Are Created Equal: Characterizing Variability in Large-Scale, Accelerator-Rich
// Systems", SC 2022, arXiv 2208.11035). The model: each rank's compute a draw of a normal around
// the measured one (a figure measured on one GPU is one draw: its expectation) with a relative
// spread s (Options::rank_spread); the step computes for the expected slowest of W draws, every
// part of compute_s (forward, backward, optimizer) 1 + s * E[max of W standard normals] times as
// long. E[max] by numerical integration of W x phi(x) Phi(x)^(W-1): 0 at 1 rank, 0.564 at 2,
// 1.029 at 4, 1.424 at 8, 1.766 at 16, 3.241 at 1,024. The spread of a given machine is not
// cited anywhere; the DGX-1 table takes it from the other model's cells, held out (Note [The
// PyTorch DGX-1 table, held out] in ddp_sim_presets.cpp).
// On one machine it can be measured: a traced two-rank run has both ranks on one clock, and
// cost_model --trace gives how far apart they end backward (the last bucket ready), the mean
// |a - b| over the steps. For two ranks max(a, b) = (a + b) / 2 + |a - b| / 2 whatever the
// draws' distribution, so the later rank is half that mean behind the mean rank; for normal
// draws E|a - b| = 2 sigma / sqrt(pi), so ddp_sim --ranks-apart-ms d is the spread
// sigma = d sqrt(pi) / 2 over the compute (at 2 ranks: d / 2 longer, exactly; at more, the
// normal's assumption). bench/one_vs_two_ranks.sh measures d in a two-rank run of its own and
// judges the prediction on another.
double expected_max_of_normals(int n) {
  if (n < 1) throw std::invalid_argument("a world of at least one rank");
  if (n == 1) return 0;
  const double h = 1e-3;  // the trapezoid rule over [-12, 12]: the tails beyond weigh < 1e-30
  double sum = 0;
  for (int i = 0; i <= 24000; ++i) {
    const double x = -12 + i * h;
    const double pdf = std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI), cdf = 0.5 * std::erfc(-x / std::sqrt(2.0));
    sum += (i == 0 || i == 24000 ? 0.5 : 1.0) * x * n * pdf * std::pow(cdf, n - 1);
  }
  return sum * h;
}

StepResult simulate(const Profile& profile, const World& world, const Network& net, const Options& given) {
  check_compute(world, given);
  if (!(given.rank_spread >= 0 && given.rank_spread < 1)) throw std::invalid_argument("the ranks' spread must be >= 0 and < 1");
  // The slowest rank's compute (Note [The slowest rank]): every part as much longer.
  Options options = given;
  const double slowest = given.rank_spread > 0 ? 1 + given.rank_spread * expected_max_of_normals(world.size()) : 1;
  options.compute_s *= slowest, options.optimizer_s *= slowest, options.backward_s *= slowest;
  if (options.bucket_cap_bytes == 0 || options.first_bucket_bytes == 0) throw std::invalid_argument("bucket limits must be > 0");
  if (!(options.per_param_s >= 0 && options.per_bucket_s >= 0 && options.copy_bytes_per_s >= 0)) {
    throw std::invalid_argument("DDP's costs must be >= 0");
  }
  if (!(options.interference >= 0 && std::isfinite(options.interference))) throw std::invalid_argument("the interference must be >= 0");
  if (!(options.allreduce_slowdown >= 0 && std::isfinite(options.allreduce_slowdown))) {
    throw std::invalid_argument("the all-reduce's slowdown must be >= 0");
  }
  check_links(world, net);

  // Forward and backward: Note [Splitting the compute].
  const Passes passes = split_passes(profile, options);
  const double backward_flops = passes.backward_flops;
  StepResult r;
  r.forward_s = passes.forward_s, r.backward_compute_s = passes.backward_s;
  const auto copy_s = [&](double bytes) { return options.copy_bytes_per_s > 0 ? bytes / options.copy_bytes_per_s : 0.0; };

  // The buckets, and which one each gradient goes to.
  const auto assignment = bucket_assignment(profile, options);
  std::vector<size_t> bucket_of(profile.parameters.size()), pending;
  for (size_t b = 0; b < assignment.size(); ++b) {
    BucketTimeline t;
    t.params = assignment[b];
    for (size_t i : assignment[b]) bucket_of[i] = b, t.bytes += profile.parameters[i].bytes;
    pending.push_back(assignment[b].size());
    r.buckets.push_back(std::move(t));
  }

  // Backward, event by event: a layer's backward, its gradients' hooks, the launches they allow
  // (in bucket order: 05's launch_ready_buckets), each all-reduce behind the one before.
  const double stretch = 1 + options.allreduce_slowdown;
  // The stop vote posted by the step before runs beside this whole step on a thread of its own,
  // slowed beside the compute, and slows it (Note [The wire and the cores]).
  double vote_end = 0;
  if (options.stop_vote) {
    const CollectiveTime vote = allreduce(world, net, 4);
    r.vote_latency_s = vote.latency_s, vote_end = r.vote_s = vote.total() * stretch;
    r.comm_s += r.vote_s;
  }
  double now = 0, link_free = 0, total_bytes = 0;
  // `d` of compute from `now`: slowed while an all-reduce runs (Note [Compute beside an
  // all-reduce]): the buckets' until link_free, the vote's until vote_end.
  const auto compute_for = [&](double d) {
    now = compute_beside(now, d, std::max(link_free, vote_end), options.interference, r.slowed, r.interference_s);
  };
  compute_for(r.forward_s);
  size_t next = 0;
  const auto by_layer = params_by_layer(profile);
  r.grad_ready_s.assign(profile.parameters.size(), 0);
  for (size_t l = profile.layers.size(); l-- > 0;) {
    const double start = now;
    if (backward_flops > 0) compute_for(r.backward_compute_s * profile.layers[l].backward_flops / backward_flops);
    r.backward_layers.push_back({l, start, now});
    for (auto i = by_layer[l].rbegin(); i != by_layer[l].rend(); ++i) {
      const double bytes = static_cast<double>(profile.parameters[*i].bytes);
      const double hook = options.per_param_s + copy_s(bytes);
      now += hook, r.ddp_overhead_s += hook, total_bytes += bytes;
      r.grad_ready_s[*i] = now;
      --pending[bucket_of[*i]];
      while (next < r.buckets.size() && pending[next] == 0) {
        BucketTimeline& b = r.buckets[next++];
        now += options.per_bucket_s, r.ddp_overhead_s += options.per_bucket_s;
        const CollectiveTime t = allreduce(world, net, static_cast<double>(b.bytes) * (options.fp16_hook ? 0.5 : 1.0));
        b.ready_s = now;
        b.start_s = std::max(now, link_free);
        b.latency_s = t.latency_s, b.bandwidth_s = t.bandwidth_s;
        b.end_s = link_free = b.start_s + t.total() * stretch;  // beside backward: slowed
        if (stretch == 1) r.comm_s += t.total();
      }
    }
  }
  r.backward_end_s = now;
  // Backward has ended: what is left of the all-reduces runs alone, at full speed.
  if (stretch != 1) {
    double free = now;
    for (BucketTimeline& b : r.buckets) {
      if (b.end_s <= now) continue;
      const double alone = b.latency_s + b.bandwidth_s;
      if (b.start_s < now) {
        b.end_s = now + (b.end_s - now) / stretch;
      } else {
        b.start_s = std::max(b.ready_s, free), b.end_s = b.start_s + alone;  // queued: behind the one before
      }
      free = b.end_s;
    }
    if (link_free > now) link_free = free;
    for (const BucketTimeline& b : r.buckets) r.comm_s += b.end_s - b.start_s;
  }
  r.exposed_comm_s += std::max(0.0, link_free - now);
  // After the wait: the averaged gradients back out of the buckets, then the optimizer.
  const double copy_back = copy_s(total_bytes);
  r.ddp_overhead_s += copy_back;
  r.step_s = std::max(now, link_free) + copy_back + options.optimizer_s;
  if (vote_end > r.step_s) {  // read at the next step's end: it waits for what outlasts this one
    r.vote_exposed_s = vote_end - r.step_s, r.exposed_comm_s += r.vote_exposed_s, r.step_s = vote_end;
  }
  r.overlap_share = r.comm_s > 0 ? std::max(0.0, 1 - r.exposed_comm_s / r.comm_s) : 0;  // not -0.0 from rounding
  r.slowest_rank_s = options.compute_s - given.compute_s;
  r.efficiency = given.compute_s / r.step_s;
  return r;
}

// Note [An FSDP step]
// `ddp_sim --fsdp` plays out one step of FSDP instead (ZeRO-3: PyTorch's fully_shard, FSDP2,
// reshard_after_forward=True) on the same inputs: every rank holds 1/W of each parameter, its
// gradient and its optimizer state, and gathers a unit's parameters whole only while the unit runs.
// The units: one per layer of the profile that has parameters, in forward order, each as many
//   bytes as its gradients (the same dtype: no mixed precision). A layer without parameters (a
//   ReLU, a pool) computes between units and gathers nothing (fully_shard wraps modules that
//   hold parameters); a layer used twice gathers for its first use only (none of bench/profiles'
//   layers used twice has parameters). The compute is split as Note [Splitting the compute]
//   splits it, forward among the layers by their forward_flops as backward by its FLOPs.
// forward: unit i waits until its all-gather has ended, computes, and frees the parameters.
// backward, layers in reverse: unit i all-gathers again (they were freed), waits, computes its
//   backward, then reduce-scatters its gradients (each rank keeps the sum of its 1/W).
// optimizer: optimizer_s / W, after the last reduce-scatter: each rank steps on its 1/W of the
//   parameters (an elementwise optimizer's time goes with the elements it updates). The DDP step
//   it is compared with steps on all of them, optimizer_s.
// When an all-gather is issued, prefetch depth d: at the latest when its unit is next to compute
//   (the compute before it has ended: with d = 0 each unit waits for its whole all-gather); and
//   when unit i starts computing, its own all-gather ended, the all-gathers of the next d units of
//   the pass (forward i+1..i+d, backward i-1..i-d) are issued. That is where FSDP2 issues them:
//   FSDPState._pre_forward (torch/distributed/fsdp/_fully_shard/_fsdp_state.py) runs the unit's
//   own pre_forward (unshard, wait_for_unshard), then _prefetch_unshard for each module given to
//   set_modules_to_forward_prefetch; _pre_backward the same, and without an explicit list it
//   prefetches the one unit before it in forward order (_backward_prefetch): FSDP2's default is
//   d = 1 in backward. In forward its default is "implicit" prefetch: the CPU, ahead of the GPU,
//   issues the next unit's all-gather on a stream of its own while this unit computes, which d = 1
//   stands for. A CPU far ahead puts several on the stream sooner than this rule: not modelled.
//   Each pass begins with an all-gather nothing can prefetch: forward's first unit (nothing runs
//   before it in the step; FSDP2 does not prefetch across the optimizer) and backward's first,
//   the last in forward, freed when its forward ended. FSDP2 keeps the root module's parameters
//   after forward for this reason (reshard_after_forward=None: True but for the root); one unit
//   per layer has no root.
// One channel: every collective runs on one channel, one after the other in the order issued
//   (as DDP's buckets do: Note [What the simulator plays out]), so in backward an all-gather
//   issued after a reduce-scatter waits for it. FSDP2 on NCCL issues all-gathers and
//   reduce-scatters on separate streams (all_gather_stream, reduce_scatter_stream) that may run
//   at once, sharing the links; FSDP1's BackwardPrefetch docs say NCCL's collectives, even from
//   different streams, contend for one per-device NCCL stream, which is why issue order matters.
//   Two at once sharing the links end, under the alpha-beta model, no sooner together than one
//   after the other; the first of them later.
// The costs: each all-gather and each reduce-scatter is one half of the ring all-reduce of Note
//   [All-reduce across nodes]: (W-1) steps of alpha + (n/W)/B on the slowest link (hierarchical:
//   the half within the node plus the half across nodes). A preset's measured tables are of
//   all-reduces; one node of their GPU count takes half the table's time (a ring all-reduce is a
//   reduce-scatter and then an all-gather); no all-gather was measured here, so for small sizes,
//   where NCCL changes protocol, the half is a guess.
// interference (Options::interference): compute takes 1 + s times as long while any collective
//   runs, as Note [Compute beside an all-reduce] has it; the collectives' own slowdown beside the
//   compute (allreduce_slowdown) is not modelled: refused.
// Not modelled: memory (FSDP's reason to be: what a rank holds is its shards plus the gathered
//   units in flight), the copies into and out of the all-gather's and reduce-scatter's buffers,
//   mixed precision (parameters gathered in bf16, gradients reduced in fp32), FSDP's CPU
//   overheads, how far FSDP2 lets all-gathers run ahead of the compute (its buffers), gradient
//   accumulation without resharding, HSDP.
FsdpResult simulate_fsdp(const Profile& profile, const World& world, const Network& net, const Options& options, int prefetch) {
  check_compute(world, options);
  if (prefetch < 0) throw std::invalid_argument("the prefetch depth must be >= 0");
  if (!(options.interference >= 0 && std::isfinite(options.interference))) throw std::invalid_argument("the interference must be >= 0");
  if (options.allreduce_slowdown != 0) throw std::invalid_argument("an FSDP step does not model the collectives' slowdown beside compute");
  check_links(world, net);

  const Passes passes = split_passes(profile, options);
  FsdpResult r;
  r.forward_s = passes.forward_s, r.backward_compute_s = passes.backward_s;
  r.optimizer_s = options.optimizer_s / world.size();
  // The units, and each layer's compute in each pass (by its FLOPs; evenly where a pass has none).
  const auto by_layer = params_by_layer(profile);
  const size_t layers = profile.layers.size();
  std::vector<size_t> unit_of(layers, SIZE_MAX);  // SIZE_MAX: a layer that gathers nothing
  std::vector<double> forward_of(layers), backward_of(layers);
  for (size_t l = 0; l < layers; ++l) {
    size_t bytes = 0;
    for (size_t i : by_layer[l]) bytes += profile.parameters[i].bytes;
    if (bytes > 0) {
      unit_of[l] = r.units.size();
      r.units.emplace_back();
      r.units.back().layer = l, r.units.back().bytes = bytes;
    }
    const Profile::Layer& x = profile.layers[l];
    forward_of[l] = passes.forward_flops > 0 ? r.forward_s * x.forward_flops / passes.forward_flops : r.forward_s / layers;
    backward_of[l] = passes.backward_flops > 0 ? r.backward_compute_s * x.backward_flops / passes.backward_flops : r.backward_compute_s / layers;
  }

  // One channel, collectives in the order issued; the compute slowed while one runs.
  double now = 0, channel_free = 0;
  const auto issue = [&](size_t bytes, double& issue_s, double& start_s, double& end_s) {
    const CollectiveTime t = half_allreduce(world, net, static_cast<double>(bytes));
    issue_s = now, start_s = std::max(now, channel_free), end_s = channel_free = start_s + t.total();
    r.latency_s += t.latency_s;
    return t.total();
  };
  const auto compute_for = [&](double d) { now = compute_beside(now, d, channel_free, options.interference, r.slowed, r.interference_s); };
  // A pass over the layers in `order`: each unit waits for its all-gather, then issues the next
  // `prefetch` units' (Note [An FSDP step]); in backward each unit's reduce-scatter follows it.
  const auto pass = [&](const std::vector<size_t>& order, bool backward) {
    std::vector<size_t> sequence;  // the units in this pass's order
    for (size_t l : order) {
      if (unit_of[l] != SIZE_MAX) sequence.push_back(unit_of[l]);
    }
    std::vector<bool> issued(r.units.size(), false);
    const auto gather = [&](size_t u) {
      FsdpGather& g = backward ? r.units[u].backward : r.units[u].forward;
      if (issued[u]) return;
      issued[u] = true;
      r.allgather_s += issue(r.units[u].bytes, g.issue_s, g.start_s, g.end_s);
    };
    size_t k = 0;  // the next unit's place in `sequence`
    for (size_t l : order) {
      const size_t u = unit_of[l];
      if (u == SIZE_MAX) {
        compute_for(backward ? backward_of[l] : forward_of[l]);
        continue;
      }
      FsdpGather& g = backward ? r.units[u].backward : r.units[u].forward;
      g.need_s = now;
      gather(u);
      now = g.compute_start_s = std::max(now, g.end_s);
      (backward ? r.backward_wait_s : r.forward_wait_s) += g.wait_s();
      for (size_t j = k + 1; j <= k + static_cast<size_t>(prefetch) && j < sequence.size(); ++j) gather(sequence[j]);
      ++k;
      compute_for(backward ? backward_of[l] : forward_of[l]);
      g.compute_end_s = now;
      if (backward) {
        FsdpUnit& unit = r.units[u];
        r.reduce_scatter_s += issue(unit.bytes, unit.reduce_scatter_issue_s, unit.reduce_scatter_start_s, unit.reduce_scatter_end_s);
      }
    }
  };
  std::vector<size_t> order(layers);
  for (size_t l = 0; l < layers; ++l) order[l] = l;
  pass(order, false);
  r.forward_end_s = now;
  std::reverse(order.begin(), order.end());
  pass(order, true);
  r.backward_end_s = now;
  r.tail_s = std::max(0.0, channel_free - now);
  r.exposed_comm_s = r.forward_wait_s + r.backward_wait_s + r.tail_s;
  r.step_s = std::max(now, channel_free) + r.optimizer_s;
  r.efficiency = options.compute_s / r.step_s;
  return r;
}

// Note [The simulated step as a trace]
// `ddp_sim --trace FILE` writes the step in the events 05's --trace writes (Note [Trace files]),
// so that the measured step and the simulated one open side by side in Perfetto or
// chrome://tracing: on rank 0's compute track "forward", then "backward" with one span per
// layer inside it ("backward fc1"), a "gradient ready" instant per gradient (param, bytes), the
// "wait for all-reduces", "optimizer" and the "step done" instant; on its collectives track
// "all-reduce bucketN" (bytes); with --stop-vote, on a track of its own, the vote. Where forward
// or backward ran slowed beside an all-reduce, a span "slowed beside an all-reduce" (category
// interference) inside theirs. Times are microseconds from the step's start.
nlohmann::json trace_of(const Profile& profile, const StepResult& r, const Options& options) {
  using nlohmann::json;
  json events = json::array();
  const auto us = [](double s) { return std::round(s * 1e9) / 1e3; };  // to the nanosecond, as Trace writes
  const auto span = [&](const std::string& name, const char* cat, double start, double end, int tid, json args = json::object()) {
    events.push_back({{"name", name}, {"cat", cat}, {"ph", "X"}, {"pid", 0}, {"tid", tid}, {"ts", us(start)}, {"dur", us(end) - us(start)},
                      {"args", std::move(args)}});
  };
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 0}, {"tid", 0}, {"args", {{"name", "rank 0 (ddp_sim: every rank alike)"}}}});
  events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", 0}, {"args", {{"name", "compute"}}}});
  events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", 1}, {"args", {{"name", "collectives"}}}});
  span("forward", "compute", 0, r.backward_layers.empty() ? r.forward_s : r.backward_layers.front().start_s, 0);
  if (options.stop_vote && r.vote_s > 0) {  // beside the buckets, on a track of its own
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", 2}, {"args", {{"name", "stop vote"}}}});
    span("all-reduce stop vote", "comm", 0, r.vote_s, 2, {{"bytes", 4}});
    if (r.vote_exposed_s > 0) span("wait for the stop vote", "ddp", r.step_s - r.vote_exposed_s, r.step_s, 0);
  }
  if (!r.backward_layers.empty()) span("backward", "compute", r.backward_layers.front().start_s, r.backward_end_s, 0);
  for (const auto& l : r.backward_layers) span("backward " + profile.layers[l.layer].name, "compute", l.start_s, l.end_s, 0);
  for (const auto& [a, b] : r.slowed) span("slowed beside an all-reduce", "interference", a, b, 0);
  for (size_t i = 0; i < r.grad_ready_s.size(); ++i) {
    events.push_back({{"name", "gradient ready"}, {"cat", "ddp"}, {"ph", "i"}, {"s", "t"}, {"pid", 0}, {"tid", 0}, {"ts", us(r.grad_ready_s[i])},
                      {"args", {{"param", i}, {"bytes", profile.parameters[i].bytes}}}});
  }
  double last = r.backward_end_s;
  for (size_t b = 0; b < r.buckets.size(); ++b) {
    const BucketTimeline& k = r.buckets[b];
    span("all-reduce bucket" + std::to_string(b), "comm", k.start_s, k.end_s, 1, {{"bytes", k.bytes}});
    last = std::max(last, k.end_s);
  }
  span("wait for all-reduces", "ddp", r.backward_end_s, last, 0);
  span("optimizer", "compute", r.step_s - options.optimizer_s, r.step_s, 0);
  events.push_back({{"name", "step done"}, {"cat", "train"}, {"ph", "i"}, {"s", "t"}, {"pid", 0}, {"tid", 0}, {"ts", us(r.step_s)},
                    {"args", {{"step", 1}}}});
  return {{"displayTimeUnit", "ms"}, {"traceEvents", events}};
}

// The FSDP step in the same events (Note [The simulated step as a trace]): on the compute track
// "forward" and "backward", inside them each unit's "forward LAYER" or "backward LAYER" and its
// "wait for all-gather LAYER" before it; on the collectives track "all-gather LAYER" (twice: for
// forward, for backward) and "reduce-scatter LAYER" (bytes); the optimizer and "step done".
nlohmann::json trace_of_fsdp(const Profile& profile, const FsdpResult& r) {
  using nlohmann::json;
  json events = json::array();
  const auto us = [](double s) { return std::round(s * 1e9) / 1e3; };
  const auto span = [&](const std::string& name, const char* cat, double start, double end, int tid, json args = json::object()) {
    events.push_back({{"name", name}, {"cat", cat}, {"ph", "X"}, {"pid", 0}, {"tid", tid}, {"ts", us(start)}, {"dur", us(end) - us(start)},
                      {"args", std::move(args)}});
  };
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 0}, {"tid", 0}, {"args", {{"name", "rank 0 (ddp_sim --fsdp: every rank alike)"}}}});
  events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", 0}, {"args", {{"name", "compute"}}}});
  events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", 1}, {"args", {{"name", "collectives"}}}});
  span("forward", "compute", 0, r.forward_end_s, 0);
  span("backward", "compute", r.forward_end_s, r.backward_end_s, 0);
  for (const FsdpUnit& u : r.units) {
    const std::string& name = profile.layers[u.layer].name;
    const auto draw = [&](const char* pass, const FsdpGather& g) {
      if (g.wait_s() > 0) span("wait for all-gather " + name, "fsdp", g.need_s, g.compute_start_s, 0);
      span(pass + (" " + name), "compute", g.compute_start_s, g.compute_end_s, 0);
      span("all-gather " + name, "comm", g.start_s, g.end_s, 1, {{"bytes", u.bytes}, {"for", pass}});
    };
    draw("forward", u.forward);
    draw("backward", u.backward);
    span("reduce-scatter " + name, "comm", u.reduce_scatter_start_s, u.reduce_scatter_end_s, 1, {{"bytes", u.bytes}});
  }
  for (const auto& [a, b] : r.slowed) span("slowed beside a collective", "interference", a, b, 0);
  if (r.tail_s > 0) span("wait for reduce-scatters", "fsdp", r.backward_end_s, r.backward_end_s + r.tail_s, 0);
  span("optimizer", "compute", r.step_s - r.optimizer_s, r.step_s, 0);
  events.push_back({{"name", "step done"}, {"cat", "train"}, {"ph", "i"}, {"s", "t"}, {"pid", 0}, {"tid", 0}, {"ts", us(r.step_s)},
                    {"args", {{"step", 1}}}});
  return {{"displayTimeUnit", "ms"}, {"traceEvents", events}};
}

}  // namespace ddp::sim
