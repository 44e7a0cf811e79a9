// defines: init_process_group() and its three steps (store, roll call, backend), as in torch.distributed.
#pragma once
#include <torch/torch.h>

#include <optional>

#include "common/compat.h"
#include "common/rank_env.h"

namespace ddp {

class FlightRecorder;

struct Group {
  RankInfo info;
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<Backend> pg;
  FlightRecorder* recorder = nullptr;  // set by a FlightRecorder on this group (05, 02's workers)
  int rank() const { return info.rank.value; }
  int size() const { return info.world_size.value; }
};

// Step 0: refuse what cannot work before touching the network (exit 2): validate() plus the
// checks that need LibTorch (nccl without a GPU or without NCCL in this build).
void check_can_start(const RankInfo& info);

// Step 1: the store every rank can reach. env:// -> TCPStore hosted by rank 0 (or by the
// launcher); file:// -> FileStore on a shared file system.
c10::intrusive_ptr<c10d::Store> make_store(const RankInfo& info);

// Step 2: the roll call. Every rank checks in; a rank that never arrives is named, a rank
// claimed twice or a disagreeing world size stops everyone. See Note [Roll call].
void roll_call(c10d::Store& store, const RankInfo& info);

// Step 3: the backend that runs collectives: Gloo on CPU tensors, NCCL on CUDA tensors.
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

}  // namespace ddp
