// defines: GpuTimeline: with --trace on a GPU, what the GPU itself ran (kernels, copies, NCCL) on
// the rank's timeline, and the overlap share from GPU time (Note [A GPU's timeline]).
#pragma once
#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

namespace ddp {

// Note [A GPU's timeline]
// On a GPU the host only queues work: a Span around forward() measures how long launching took,
// not how long the GPU computed, and an NCCL all-reduce "ends" for the host as soon as it is
// queued (its future completes at once). So --trace on a GPU also records the GPU's own
// activity with LibTorch's profiler (Kineto over CUPTI, what torch.profiler uses): each kernel,
// copy and NCCL kernel becomes a span on a "GPU stream" track of the rank's trace file, on the
// same clock as the host spans, and the merged file of the run holds both. The overlap share
// is then measured where it happens: the part of the all-reduce kernels' time during which a
// compute kernel ran beside them on another stream. A world of one rank has no all-reduce
// kernel at all (NCCL copies nothing), and the share is then not measured. Builds against
// LibTorch 1.13 (CPU only) have no GPU and record nothing.
class GpuTimeline {
 public:
  struct Overlap {
    int kernels = 0;          // gradient all-reduce kernels seen
    double comm_us = 0;       // their GPU time, summed
    double hidden_us = 0;     // the part with a compute kernel running beside it
    int gpu_events = 0;       // all GPU events written to the trace
    double share() const { return comm_us > 0 ? hidden_us / comm_us : 0; }
  };

  // Starts recording if the trace is on and `device` is a GPU; otherwise does nothing.
  explicit GpuTimeline(const torch::Device& device);
  ~GpuTimeline();  // stops a recording still running, writing nothing
  GpuTimeline(const GpuTimeline&) = delete;
  GpuTimeline& operator=(const GpuTimeline&) = delete;

  bool on() const { return on_; }
  // Waits for the GPU, stops recording, writes the GPU's events into trace(), returns the overlap.
  Overlap stop();

 private:
  bool on_ = false;
  double mark_wall_us_ = 0;  // wall_us() when the clock mark (a profiler event) was recorded
};

// The parts of GpuTimeline that need no GPU (tested on any host):
// the time of the `comm` intervals [start, end) during which some `compute` interval ran too.
double overlapped_us(const std::vector<std::pair<double, double>>& comm,
                     std::vector<std::pair<double, double>> compute);
// Whether a kernel is a gradient bucket's all-reduce: a float sum (NCCL 2.2x names it
// ncclDevKernel_AllReduce_Sum_f32_..., older versions ncclKernel_AllReduce_..._Sum_float). The
// stop vote (an int max), validation's sums (double) and the first broadcast are not.
bool is_gradient_allreduce(const std::string& kernel_name);

}  // namespace ddp
