// defines: init_process_group() and its three steps (store, roll call, backend), as in torch.distributed.
#pragma once
#include <torch/torch.h>

#include <optional>

#include "common/group/compat.h"
#include "common/launch/rank_env.h"

namespace ddp {

class FlightRecorder;

// A joined process group. Leaving is part of the lesson: see Note [Leaving the group].
struct Group {
  RankInfo info;
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<Backend> pg;
  FlightRecorder* recorder = nullptr;  // set by a FlightRecorder on this group (05, 02's workers)
  // DDP_COUNT_COLLECTIVES=1: the backend's sequence number when joined (collective_count.h).
  std::optional<uint64_t> sequence_at_join;
  int rank() const { return info.rank.value; }
  int size() const { return info.world_size.value; }

  Group() = default;
  // Counts its collectives from here when the environment asks (DDP_COUNT_COLLECTIVES=1).
  Group(RankInfo i, c10::intrusive_ptr<c10d::Store> s, c10::intrusive_ptr<Backend> p);
  Group(Group&&) noexcept = default;
  Group& operator=(Group&&) noexcept = default;
  Group(const Group&) = delete;  // one owner shuts the backend down, once
  ~Group() { destroy(); }
  // torch.distributed.destroy_process_group(): shut the backend down, then release it, then
  // the store. Runs by itself when the Group goes out of scope; idempotent.
  void destroy() noexcept;
};

// Chapter 01's step 2: refuse what cannot work before touching the network (exit 2): validate() plus the
// checks that need LibTorch (nccl without a GPU or without NCCL in this build).
void check_can_start(const RankInfo& info);

// Step 3: the store every rank can reach. env:// -> TCPStore hosted by rank 0 (or by the
// launcher); file:// -> FileStore on a shared file system.
c10::intrusive_ptr<c10d::Store> make_store(const RankInfo& info);

// Step 4: the roll call (roll_call.cpp). Every rank checks in; a rank that never arrives is
// named, a rank claimed twice or a disagreeing world size stops everyone. See Note [Roll call].
void roll_call(c10d::Store& store, const RankInfo& info);

// Step 5: the backend that runs collectives: Gloo on CPU tensors, NCCL on CUDA tensors.
c10::intrusive_ptr<Backend> make_backend(const c10::intrusive_ptr<c10d::Store>& store, const RankInfo& info);

// How long joining may take before a Watchdog gives up: 3 x --timeout + 5 s.
std::chrono::milliseconds join_time_limit(const RankInfo& info);

// All of the above: what torch.distributed.init_process_group(init_method=...) does.
Group init_process_group(const RankInfo& info);

// Chapter 01's steps for the chapters after it: resolve the settings from flags and the
// environment; with --explain-env print them and return nothing (the caller exits 0);
// otherwise tag the log with the rank and join. Throws UsageError/JoinError like the steps.
std::optional<Group> join_or_explain(const CommonFlags& flags);

// The device a rank's tensors live on: cuda:<local rank> for nccl, cpu for gloo.
torch::Device device_for(const RankInfo& info);

// One line on what a rank computes with: "cuda:0 (NVIDIA H100 80GB HBM3)" or "cpu, BLAS
// OpenBLAS (openblas-pthread), 1 intra-op thread".
std::string describe_compute(const torch::Device& device);

// The line that says why a host with GPUs runs Gloo (RankInfo::backend_note), once per host:
// by its local rank 0. Nothing when there is nothing to explain.
void log_backend_note(const RankInfo& info);

// The GPUs the default backend sees: DDP_GPU_COUNT when set, else what LibTorch sees (0
// without CUDA). Starts CUDA: a launcher calls it in its children, after fork().
GpuCount visible_gpus();

// resolve_rank_info() of common/launch/rank_env.h with this process's environment and GPUs.
RankInfo resolve_rank_info(const CommonFlags& flags);

}  // namespace ddp
