// provides: GpuTimeline: the GPU's kernels from LibTorch's Kineto profiler, written into --trace.
#include "05_ddp/beyond/gpu_timeline.h"

#include <torch/version.h>

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/basics/log.h"
#include "common/observe/trace.h"

#if TORCH_VERSION_MAJOR >= 2
#include <ATen/record_function.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#define DDP_GPU_TIMELINE 1
#endif

namespace ddp {
namespace {

// The union of [start, end) intervals, sorted.
std::vector<std::pair<double, double>> merged(std::vector<std::pair<double, double>> v) {
  std::sort(v.begin(), v.end());
  std::vector<std::pair<double, double>> out;
  for (const auto& iv : v) {
    if (!out.empty() && iv.first <= out.back().second) {
      out.back().second = std::max(out.back().second, iv.second);
    } else {
      out.push_back(iv);
    }
  }
  return out;
}

// How much of [s, e) the sorted, disjoint intervals cover.
double covered(const std::vector<std::pair<double, double>>& u, double s, double e) {
  double sum = 0;
  auto it = std::lower_bound(u.begin(), u.end(), std::make_pair(s, s),
                             [](const auto& a, const auto& b) { return a.second < b.first; });
  for (; it != u.end() && it->first < e; ++it) sum += std::max(0.0, std::min(e, it->second) - std::max(s, it->first));
  return sum;
}

}  // namespace

bool is_gradient_allreduce(const std::string& name) {
  return name.find("AllReduce") != std::string::npos && name.find("Sum") != std::string::npos &&
         (name.find("f32") != std::string::npos || name.find("float") != std::string::npos);
}

double overlapped_us(const std::vector<std::pair<double, double>>& comm,
                     std::vector<std::pair<double, double>> compute) {
  const auto busy = merged(std::move(compute));
  double sum = 0;
  for (const auto& [s, e] : comm) sum += covered(busy, s, e);
  return sum;
}

#ifdef DDP_GPU_TIMELINE
namespace {

namespace prof = torch::autograd::profiler;
namespace impl = torch::profiler::impl;

constexpr const char* kClockMark = "ddp::clock";

Trace::Track stream_track(int64_t stream) { return static_cast<Trace::Track>(Trace::kGpuStreams + stream); }

}  // namespace

GpuTimeline::GpuTimeline(const torch::Device& device) {
  if (!device.is_cuda() || !trace().on()) return;
  const impl::ProfilerConfig config(impl::ProfilerState::KINETO);
  const std::set<impl::ActivityType> activities{impl::ActivityType::CPU, impl::ActivityType::CUDA};
  prof::prepareProfiler(config, activities);
  prof::enableProfiler(config, activities, {at::RecordScope::USER_SCOPE});
  on_ = true;
  // One host event at a known wall-clock time: the profiler's clock is set against ours by it.
  mark_wall_us_ = wall_us();
  { RECORD_USER_SCOPE(kClockMark); }
}

GpuTimeline::~GpuTimeline() {
  if (!on_) return;
  try {
    (void)prof::disableProfiler();
  } catch (const std::exception& e) {
    log("GPU timeline: " + std::string(e.what()));
  }
}

GpuTimeline::Overlap GpuTimeline::stop() {
  Overlap o;
  if (!on_) return o;
  on_ = false;
  torch::cuda::synchronize();
  const std::unique_ptr<prof::ProfilerResult> result = prof::disableProfiler();
  const auto& events = result->events();
  double offset_us = 0;  // wall_us() - profiler time
  for (const auto& e : events) {
    if (e.name() == kClockMark) offset_us = mark_wall_us_ - static_cast<double>(e.startNs()) / 1e3;
  }
  std::vector<std::pair<double, double>> compute, comm;
  std::set<int64_t> streams;
  for (const auto& e : events) {
    if (e.deviceType() != c10::DeviceType::CUDA) continue;
    const std::string name = e.name();
    const double start = static_cast<double>(e.startNs()) / 1e3 + offset_us;
    const double end = start + static_cast<double>(e.durationNs()) / 1e3;
    const bool nccl = name.rfind("nccl", 0) == 0;
    const bool copy = name.rfind("Memcpy", 0) == 0 || name.rfind("Memset", 0) == 0;
    const int64_t stream = e.deviceResourceId();
    streams.insert(stream);
    trace().span(name, nccl ? "gpu-comm" : copy ? "gpu-copy" : "gpu-kernel", start, end, stream_track(stream),
                 {{"stream", stream}});
    ++o.gpu_events;
    if (nccl && is_gradient_allreduce(name)) {
      comm.emplace_back(start, end);
    } else if (!nccl && !copy) {
      compute.emplace_back(start, end);
    }
  }
  for (int64_t stream : streams) trace().thread_name(stream_track(stream), "GPU stream " + std::to_string(stream));
  for (const auto& [s, e] : comm) ++o.kernels, o.comm_us += e - s;
  o.hidden_us = overlapped_us(comm, std::move(compute));
  return o;
}

#else  // LibTorch 1.13: CPU only, nothing to record

GpuTimeline::GpuTimeline(const torch::Device&) {}
GpuTimeline::~GpuTimeline() = default;
GpuTimeline::Overlap GpuTimeline::stop() { return {}; }

#endif

}  // namespace ddp
