// defines: the CPU kernels every process the tests start computes with, pinned where this CPU can
// run the ones the READMEs' figures were recorded with (Note [CPU kernels and the recorded
// figures] in kernels.cpp).
#pragma once
#include <map>
#include <string>
#include <vector>

namespace ddp_test {

// One variable that chooses a library's kernels, and the value the tests give it.
struct KernelPin {
  std::string name, value;
  std::string library;  // what reads it: "OpenBLAS", "oneDNN", "MKL"
};

// The variables the tests set (NAME=value), on this CPU, where the environment has not chosen:
// MKL_CBWR=COMPATIBLE everywhere; OPENBLAS_CORETYPE=Haswell and DNNL_MAX_CPU_ISA=AVX2 on an
// x86-64 CPU with AVX2 and FMA. The test binaries set them in their own environment before any
// test runs, so every process they start inherits them.
std::vector<KernelPin> kernel_pins();

// Why this CPU cannot run the kernels the figures were recorded with ("" when it can): not x86-64,
// or no AVX2 and FMA. Asked portably: on another architecture the answer is its name.
std::string cpu_cannot_run_recorded_kernels();

// Why a process started with the tests' environment plus `overrides` cannot print the cpu
// flavour's recorded figures ("" when it can): the CPU, or a variable set to other kernels than
// the recorded ones ("OPENBLAS_CORETYPE=Sandybridge, recorded with Haswell").
std::string recorded_figures_cannot_hold(const std::map<std::string, std::string>& overrides = {});

}  // namespace ddp_test
