// defines: make_reproducible(): the one place that asks LibTorch for run-to-run identical results.
#pragma once

namespace ddp {

// Note [Reproducible GPU runs]
// On the CPU our runs are bit-identical by construction. On a GPU they are not by default:
// cuDNN picks convolution algorithms by benchmark and some of them add in a different order
// from run to run, cuBLAS splits work by a workspace size, and some CUDA kernels use atomics.
// Two identical CNN runs on an H100 ended with different fingerprints (max |diff| 0.11 after a
// kill/resume). make_reproducible(true) sets, before CUDA starts:
//   CUBLAS_WORKSPACE_CONFIG=:4096:8 (unless already set; read when cuBLAS creates its handle),
//   cuDNN deterministic, cuDNN benchmark off, and deterministic algorithms (warn-only: an op
//   without a deterministic kernel warns instead of stopping the run).
// Chapter 05 turns it on by default (its checks compare fingerprints); --deterministic off
// trades that for speed: on the CPU it changes no kernel; on a GPU it costs, which
// 05_ddp/going_further/gpu.md says how to measure.
void make_reproducible(bool on);

}  // namespace ddp
