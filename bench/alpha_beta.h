// defines: the alpha-beta cost model of a ring all-reduce, its fit to measurements, and the
// DDP step it predicts (bench/cost_model).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ddp::cost {

// Note [The alpha-beta model of a ring all-reduce]
// A ring all-reduce of S bytes over n ranks is a reduce-scatter and an all-gather: 2(n-1)
// steps, each sending S/n bytes to the next rank. A step costs a latency alpha plus S/n bytes
// at beta seconds per byte, so
//     T(n, S) = 2(n-1) alpha + 2(n-1)/n S beta.
// nccl-tests reports the same thing as bandwidths: algbw = S / T, and busbw = algbw 2(n-1)/n,
// the rate each link actually carries, which for a ring tends to 1/beta as S grows and is
// comparable across world sizes. T is linear in (alpha, beta): least squares over the
// measured points fits both at once. Gloo on one machine is not a ring of links (its ranks
// share cores and memory), so the fit says how far the model carries, not that it is exact:
// the table prints the error of every point.

struct Point {
  int world = 2;
  double bytes = 0;
  double seconds = 0;  // measured
};

struct AlphaBeta {
  double alpha = 0;  // seconds per step
  double beta = 0;   // seconds per byte
  double time(int world, double bytes) const { return 2.0 * (world - 1) * (alpha + bytes / world * beta); }
};

double algbw(const Point& p);  // bytes/s
double busbw(const Point& p);  // algbw * 2(n-1)/n

// Least squares over the points, each weighted by 1/T^2 (relative error: a 4 KiB point in
// 100 us counts as much as a 64 MiB point in 100 ms). Throws std::invalid_argument if the
// points cannot determine both (fewer than two distinct sizes).
AlphaBeta fit(const std::vector<Point>& points);

// One gradient as backward produces it: its size, and when it is ready (seconds after
// backward started).
struct Gradient {
  double bytes = 0, ready_s = 0;
};

// A DDP step by the model. Buckets are cut as 05 (and PyTorch) cut them: gradients in the
// order they become ready, whole tensors, a bucket closed once it holds at least its limit
// (`first_bucket` for the first, `bucket_cap` after). Without `gradients`, backward produces
// `param_bytes` as a steady stream over `backward_s` and a bucket is exactly its limit. Each
// bucket's all-reduce starts when its last gradient is ready and the previous all-reduce is
// done; the step ends when backward and the last all-reduce have, plus forward and optimizer.
struct StepPlan {
  double param_bytes = 0, bucket_cap = 25.0 * (1 << 20);
  double first_bucket = 1 << 20;  // the first bucket's limit; with bucket_cap infinite: one bucket (05 --one-bucket)
  double wire_fraction = 1;       // the bytes sent per byte of gradient: 0.5 with an fp16/bf16 comm hook
  double forward_s = 0, backward_s = 0, optimizer_s = 0;
  int world = 2;
  std::vector<Gradient> gradients;  // in ready order (from a --trace run); empty: a steady stream
};
struct StepPrediction {
  int buckets = 0;
  double comm_s = 0;     // sum of the all-reduces
  double exposed_s = 0;  // comm left after backward
  double step_s = 0;
  double hidden_share() const { return comm_s > 0 ? 1 - exposed_s / comm_s : 0; }
};
StepPrediction predict_step(const AlphaBeta& m, const StepPlan& plan);

// A ring over `nodes` nodes (each with any number of GPUs) is as fast as its slowest link: within a node
// at `intra_gbps`, between nodes at `inter_gbps` (gigabits per second, as links are sold).
AlphaBeta cluster(double alpha, int nodes, double intra_gbps, double inter_gbps);

}  // namespace ddp::cost
