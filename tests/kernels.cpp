// provides: the CPU kernels of every process the tests start (kernels.h).
//
// Note [CPU kernels and the recorded figures]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// LibTorch's CPU arithmetic is done by libraries that pick their kernels by CPU when they load,
// and kernels of different widths add in different orders: the same run prints other last digits
// (losses, fingerprints) on another CPU. Which libraries, per flavour:
//   cpu flavour (Debian's LibTorch 1.13, and python3-torch, the same library): matrix products on
//     the system's libblas.so.3, OpenBLAS (scripts/setup.sh); the CNN's convolutions on oneDNN
//     2.6; ATen's own loops at its AVX2 level on every CPU with AVX2. OpenBLAS takes its Haswell
//     kernels on an AVX2 CPU and its SkylakeX/Cooperlake ones on an AVX-512 CPU (Intel or AMD),
//     oneDNN its AVX-512 ones there: 03's first README run (world size 2) prints bbff0abd97303d08 with the
//     Haswell or Zen kernels, 2c90347cca59adc3 with the SkylakeX/Cooperlake ones, on one AMD EPYC.
//     The READMEs' outputs were recorded with OPENBLAS_CORETYPE=Haswell and DNNL_MAX_CPU_ISA=AVX2,
//     which every x86-64 CPU with AVX2 and FMA runs alike.
//   cuda flavour (PyPI torch 2.11 on the CPU, and the virtualenv's Python, the same wheel): matrix
//     products on MKL 2024 inside the wheel, convolutions on oneDNN 3.10. MKL picks its code by
//     CPU maker and width, and on an Intel AVX-512 CPU (Sapphire Rapids) its results also depend
//     on where the operands lie in memory: the C++ trainer and the Python reference, which allocate
//     differently, then disagree (PowerSGD's small products, max |diff| 2.83e-4). MKL's Conditional
//     Numerical Reproducibility, MKL_CBWR=COMPATIBLE, takes one path on every x86-64 CPU, Intel's
//     or AMD's, whatever the alignment: both parity cases were bit-identical with it there, and
//     still differed with MKL_CBWR=AVX2. On an AMD CPU MKL honours no other branch: MKL_CBWR=AVX2
//     or AVX512 read back as CNR:AUTO (MKL_VERBOSE), so an AMD machine cannot take Intel's paths.
//     No figure of this flavour is recorded; its tests compare C++ with Python on one machine.
//   Another architecture (arm64: Debian 12 in a VM on an Apple-silicon Mac) has other kernels
//   altogether, and nothing makes them add as x86-64's do.
// So the test binaries set MKL_CBWR=COMPATIBLE, and OPENBLAS_CORETYPE=Haswell and
// DNNL_MAX_CPU_ISA=AVX2 where the CPU has AVX2 and FMA, in their own environment before the first
// test (a variable the environment already sets is left as it is), and every process they start
// inherits them: chapters, launchers, Python references, shells, Slurm jobs (sbatch passes its
// environment on). Pinned.KernelsReachEveryKindOfProcess asks each library in such processes what
// it runs. The exercise checks and scripts/run.sh's course, which run outside the test binaries,
// set the same through scripts/kernels.sh (Pinned.TheExerciseChecksPinTheSame).
// Where the recorded figures cannot hold (recorded_figures_cannot_hold(): the CPU, or a variable
// set to other kernels), the README checks compare what must still hold and say which figures
// they did not compare and why (Note [Checked examples] in test_docs.cpp); parity with PyTorch
// holds on any kernels, since both sides load the same libraries.
#include "kernels.h"

#include <strings.h>
#include <sys/utsname.h>

#include <cstdlib>

namespace ddp_test {
namespace {

// The cpu flavour's kernels the READMEs' figures were recorded with.
const std::vector<KernelPin> kRecorded = {{"OPENBLAS_CORETYPE", "Haswell", "OpenBLAS"},
                                          {"DNNL_MAX_CPU_ISA", "AVX2", "oneDNN"}};

// Set once, before main(): every process started after inherits them.
const bool kPinned = [] {
  for (const KernelPin& p : kernel_pins()) ::setenv(p.name.c_str(), p.value.c_str(), /*overwrite=*/0);
  return true;
}();

}  // namespace

std::string cpu_cannot_run_recorded_kernels() {
#if defined(__x86_64__)
  __builtin_cpu_init();  // this may run before main(), ahead of libgcc's own initialisation
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    return "this x86-64 CPU lacks AVX2 or FMA, which the recorded (Haswell) kernels use";
  }
  return "";
#else
  struct utsname u{};
  ::uname(&u);
  return std::string("this CPU is ") + u.machine + ", not x86-64, whose kernels the figures were recorded with";
#endif
}

std::vector<KernelPin> kernel_pins() {
  std::vector<KernelPin> pins;
  if (cpu_cannot_run_recorded_kernels().empty()) pins = kRecorded;
  pins.push_back({"MKL_CBWR", "COMPATIBLE", "MKL"});
  return pins;
}

std::string recorded_figures_cannot_hold(const std::map<std::string, std::string>& overrides) {
  std::string why = cpu_cannot_run_recorded_kernels();
  if (!why.empty()) return why;
  for (const KernelPin& r : kRecorded) {
    const char* env = std::getenv(r.name.c_str());
    const auto it = overrides.find(r.name);
    const std::string value = it != overrides.end() ? it->second : env ? env : "";
    // Both libraries read their names without regard to case.
    if (::strcasecmp(value.c_str(), r.value.c_str()) != 0) {
      why += std::string(why.empty() ? "" : "; ") + r.name + (value.empty() ? " unset" : "=" + value) + ", recorded with " +
             r.value + " (" + r.library + ")";
    }
  }
  return why;
}

}  // namespace ddp_test
