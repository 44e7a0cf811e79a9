// defines: the DDP step simulator of bench/ddp_sim: one step of chapter 05's DDP played out at any
// scale from a model profile, a world and a network (Note [What the simulator plays out]); and
// one FSDP step on the same inputs (Note [An FSDP step]).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace ddp::sim {

constexpr size_t kMiB = 1024 * 1024;

// ---- the inputs ----

// A model as bench/profile_model.py writes it (bench/profiles/<model>.json).
struct Profile {
  struct Parameter {
    std::string name, layer;  // the layer whose backward produces its gradient
    int64_t numel = 0;
    size_t bytes = 0;
  };
  struct Layer {
    std::string name, type;
    double forward_flops = 0, backward_flops = 0;
  };
  std::string model, source;
  std::vector<Parameter> parameters;  // in registration order: DDP's order
  std::vector<Layer> layers;          // in forward execution order
};
// UsageError naming `where` (the file) and the field when the JSON lacks one or it is malformed.
Profile parse_profile(const nlohmann::json& j, const std::string& where);
Profile read_profile(const std::string& path);  // UsageError when unreadable

// One kind of link: bytes per second one rank's share of it carries, and the latency of one
// step of a collective over it (the alpha of bench/alpha_beta.h).
struct Link {
  double bytes_per_s = 0, latency_s = 0;
};
enum class Algorithm { ring, hierarchical };  // Note [All-reduce across nodes]
// An all-reduce measured on one node of `gpus` GPUs (nccl-tests' all_reduce_perf: the bytes of
// the buffer and the time it took), read between its rows (Note [Measured all-reduce tables]).
struct MeasuredAllReduce {
  int gpus = 0;
  std::vector<std::pair<double, double>> rows;  // (bytes, seconds), bytes increasing
};
struct Network {
  Link intra;  // within a node: GPU to GPU
  Link inter;  // between nodes: all of one node's network interfaces together
  Algorithm algorithm = Algorithm::ring;
  // Within one node: the world's own measured all-reduce where there is one for its GPU count,
  // instead of the ring over `intra` (a node's links differ with the GPUs it uses).
  std::vector<MeasuredAllReduce> measured;
};
struct World {
  int nodes = 1, gpus_per_node = 1;
  int size() const { return nodes * gpus_per_node; }
};

// Which buckets: Note [Buckets as each DDP cuts them].
enum class Bucketing { rebuilt, first_iteration, pytorch_1_4 };

struct Options {
  double compute_s = 0;    // one step without DDP on one GPU: forward, backward and optimizer
  double optimizer_s = 0;  // the part of compute_s after backward (Note [Splitting the compute])
  double backward_s = 0;   // the part of compute_s that is backward, measured; 0: the FLOPs' share
  size_t bucket_cap_bytes = 25 * kMiB;   // 05's --bucket-cap-mb, PyTorch's bucket_cap_mb
  size_t first_bucket_bytes = 1 * kMiB;  // PyTorch's dist._DEFAULT_FIRST_BUCKET_BYTES
  Bucketing bucketing = Bucketing::rebuilt;
  // DDP's own costs (Note [DDP's own costs]); 0: none.
  double per_param_s = 0;        // each gradient's hook
  double per_bucket_s = 0;       // each bucket's launch
  double copy_bytes_per_s = 0;   // copying into and out of buckets; 0: free
  // What goes on the wire (Note [The wire and the cores]).
  bool fp16_hook = false;   // 05's --comm-hook fp16: each bucket all-reduced as float16
  bool stop_vote = false;   // 05's stop vote: a 4-byte all-reduce each step (Note [The wire and the cores])
  // Compute and all-reduce on shared engines (Note [Compute beside an all-reduce]), both measured:
  // backward takes 1 + interference times as long while an all-reduce runs, and an all-reduce
  // 1 + allreduce_slowdown times as long while backward computes; 0: undisturbed.
  double interference = 0, allreduce_slowdown = 0;
  // Each rank's compute a draw of this relative spread around compute_s; the step computes for
  // the slowest of the world's ranks (Note [The slowest rank]); 0: all ranks alike.
  double rank_spread = 0;
};

// E[max of n independent standard normals]: 0 at 1, 0.564 at 2, 1.029 at 4, 1.424 at 8 (Note
// [The slowest rank]).
double expected_max_of_normals(int n);

// ---- the result ----

struct BucketTimeline {
  size_t bytes = 0;
  std::vector<size_t> params;  // indices into Profile::parameters, in the bucket's order
  double ready_s = 0, start_s = 0, end_s = 0;  // seconds from the start of the step
  double latency_s = 0, bandwidth_s = 0;       // the all-reduce's two terms (end - start = their sum)
};
struct StepResult {
  double forward_s = 0, backward_compute_s = 0;  // compute_s split (Note [Splitting the compute])
  double ddp_overhead_s = 0;  // hooks, launches and copies (Note [DDP's own costs])
  double slowest_rank_s = 0;  // the compute longer on the slowest rank (Options::rank_spread)
  double interference_s = 0;  // what forward and backward took longer beside all-reduces (Options::interference)
  double backward_end_s = 0;  // from the start of the step: forward, backward and its hooks
  double comm_s = 0;          // every all-reduce, end to end (slowed where it ran beside backward)
  double exposed_comm_s = 0;  // the communication not hidden: left once backward has ended
  double vote_s = 0, vote_latency_s = 0;  // stop_vote: its all-reduce and that one's latency terms
                                          // (in comm_s; in exposed_comm_s as far as exposed)
  double vote_exposed_s = 0;  // what of the vote outlasts the step (in exposed_comm_s)
  // The timeline a trace draws (ddp_sim --trace): each layer's backward (layer index, start,
  // end) in the order they run, when each gradient was ready (by parameter index), and the
  // stretches of forward and backward slowed beside an all-reduce (start, end).
  struct LayerSpan {
    size_t layer = 0;
    double start_s = 0, end_s = 0;
  };
  std::vector<LayerSpan> backward_layers;
  std::vector<double> grad_ready_s;
  std::vector<std::pair<double, double>> slowed;
  double step_s = 0;
  double overlap_share = 0;   // 1 - exposed / comm (0 without communication)
  double efficiency = 0;      // compute_s / step_s: per GPU, against one GPU without DDP
  std::vector<BucketTimeline> buckets;  // in launch order
};

// ---- the model ----

// An all-reduce of `bytes` over the world (Note [All-reduce across nodes]); latency and bandwidth
// terms apart, their sum is the time.
struct CollectiveTime {
  double latency_s = 0, bandwidth_s = 0;
  double total() const { return latency_s + bandwidth_s; }
};
CollectiveTime ring_allreduce(int ranks, double bytes, const Link& link);
// `bytes` read off a measured table (Note [Measured all-reduce tables]); std::invalid_argument
// for a table of fewer than two rows or rows out of order.
CollectiveTime interpolate(const MeasuredAllReduce& table, double bytes);
// The measured table `world` takes its all-reduce from: one node, and a table of its GPU count;
// nullptr otherwise (the ring or hierarchical formula).
const MeasuredAllReduce* measured_for(const World& world, const Network& net);
CollectiveTime allreduce(const World& world, const Network& net, double bytes);

// Parameter indices in the order their gradients become ready (Note [Splitting the compute]).
std::vector<size_t> ready_order(const Profile& profile);
// The buckets, parameter indices in launch order (Note [Buckets as each DDP cuts them]).
std::vector<std::vector<size_t>> bucket_assignment(const Profile& profile, const Options& options);

// One step. std::invalid_argument for inputs no step has (no GPU, no compute, a link without
// bandwidth): the tool turns those into UsageError naming its flag first.
StepResult simulate(const Profile& profile, const World& world, const Network& net, const Options& options);

// ---- an FSDP step (Note [An FSDP step] in bench/ddp_sim.cpp) ----

// One half of the ring all-reduce: (ranks - 1) steps, each alpha + (bytes / ranks) / B. An
// all-gather and a reduce-scatter each cost this; the two together are ring_allreduce().
CollectiveTime ring_half(int ranks, double bytes, const Link& link);
// An all-gather (or a reduce-scatter: the same cost) of `bytes` over the world: half of what
// allreduce() takes for them, term for term, on the same links, algorithm and measured table.
CollectiveTime half_allreduce(const World& world, const Network& net, double bytes);

// One unit (a layer with parameters) of an FSDP step: its all-gathers before forward and
// before backward, and its reduce-scatter after backward. Seconds from the start of the step.
struct FsdpGather {
  double issue_s = 0, start_s = 0, end_s = 0;  // the all-gather: issued, on the channel, done
  double need_s = 0;     // when the unit could have started: the compute before it had ended
  double compute_start_s = 0, compute_end_s = 0;
  double wait_s() const { return compute_start_s - need_s; }
  bool in_time() const { return end_s <= need_s; }  // the accounting question
};
struct FsdpUnit {
  size_t layer = 0;  // index into Profile::layers (its first use in forward)
  size_t bytes = 0;  // its parameters' bytes (= its gradients')
  FsdpGather forward, backward;
  double reduce_scatter_issue_s = 0, reduce_scatter_start_s = 0, reduce_scatter_end_s = 0;
};
struct FsdpResult {
  double forward_s = 0, backward_compute_s = 0;  // compute_s split as simulate() splits it
  double optimizer_s = 0;      // on the shard: Options::optimizer_s / W
  double forward_end_s = 0, backward_end_s = 0, step_s = 0;
  double allgather_s = 0, reduce_scatter_s = 0;  // every collective of each kind, end to end
  double latency_s = 0;        // of those two, the latency terms (the rest is bandwidth)
  double forward_wait_s = 0, backward_wait_s = 0;  // the units' waits for their all-gathers
  double tail_s = 0;           // the collectives still running once backward has ended
  double exposed_comm_s = 0;   // forward_wait_s + backward_wait_s + tail_s
  double interference_s = 0;   // compute slowed beside collectives (Options::interference)
  double efficiency = 0;       // compute_s / step_s
  std::vector<FsdpUnit> units;  // in forward order
  std::vector<std::pair<double, double>> slowed;
};
// One FSDP step with `prefetch` all-gathers issued ahead (0: none). Of `options` it takes the
// compute (compute_s, optimizer_s, backward_s) and the interference; the buckets, DDP's costs,
// the fp16 hook and the stop vote are DDP's. std::invalid_argument as simulate(), and for a
// negative prefetch or an allreduce_slowdown (not modelled here).
FsdpResult simulate_fsdp(const Profile& profile, const World& world, const Network& net, const Options& options, int prefetch);
// That step as trace_of() writes a DDP step: each unit's forward and backward, its waits, its
// all-gathers and its reduce-scatter.
nlohmann::json trace_of_fsdp(const Profile& profile, const FsdpResult& result);

// The step as 05's --trace writes one (Note [Trace files] in common/observe/trace.h), merged form
// ({"traceEvents": [...]}), rank 0 standing for all: forward, each layer's backward, each
// gradient ready, each bucket's all-reduce, the stretches slowed beside one, the wait, the
// optimizer, "step done" (Note [The simulated step as a trace]).
nlohmann::json trace_of(const Profile& profile, const StepResult& result, const Options& options);

}  // namespace ddp::sim
