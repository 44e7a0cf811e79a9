// defines: the one place where LibTorch 1.13 (Debian) and 2.x (pip) c10d differ for this course.
#pragma once
#include <ATen/autocast_mode.h>
#include <torch/version.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#ifndef USE_C10D_GLOO
// Without it ProcessGroupGloo.hpp compiles to nothing and the errors come much later.
#error "USE_C10D_GLOO is not defined: link the target against LibTorch's CMake target 'torch'"
#endif

namespace ddp {

#if TORCH_VERSION_MAJOR >= 2
// 2.x splits the user-facing ProcessGroup from the per-backend implementation; the
// collectives (allreduce, broadcast, barrier, ...) are on c10d::Backend.
using Backend = c10d::Backend;
#else
// 1.13: ProcessGroupGloo and ProcessGroupNCCL derive from c10d::ProcessGroup directly.
using Backend = c10d::ProcessGroup;
#endif

// Autocast on CUDA (mixed precision) in `dtype`, on or off for the calling thread.
inline void set_cuda_autocast(bool enabled, at::ScalarType dtype) {
#if TORCH_VERSION_MAJOR >= 2
  at::autocast::set_autocast_dtype(at::kCUDA, dtype);
  at::autocast::set_autocast_enabled(at::kCUDA, enabled);
#else
  at::autocast::set_autocast_gpu_dtype(dtype);
  at::autocast::set_enabled(enabled);
#endif
  if (!enabled) at::autocast::clear_cache();
}

// What destroy_process_group() does to a backend before it is released: 2.x has shutdown()
// (flush and leave cleanly; NCCL stops its watchdog and heartbeat-monitor threads, which poll
// the store) and abort() (leave at once: after a failure, when pending work may never finish).
// Without either, ~ProcessGroupNCCL warns that destroy_process_group() was not called. 1.13
// has neither: its destructors do the work.
inline void shutdown_backend(Backend& pg, bool failed) {
#if TORCH_VERSION_MAJOR >= 2
  if (failed) {
    pg.abort();
  } else {
    pg.shutdown();
  }
#else
  (void)pg;
  (void)failed;
#endif
}

constexpr bool kHasNccl =
#ifdef USE_C10D_NCCL
    true;
#else
    false;
#endif

}  // namespace ddp
