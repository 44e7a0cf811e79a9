// defines: blas_in_use(): which BLAS LibTorch's matrix products run on; a warning for the slow one.
#pragma once
#include <string>

namespace ddp {

// Note [Which BLAS]
// Debian's libtorch (BLAS_INFO=generic) calls whatever libblas.so.3 the system's alternatives
// point to. Installed with --no-install-recommends that is the reference BLAS, plain loops:
// a 64x784 . 784x512 matmul took 10.8 ms there and 0.59 ms on OpenBLAS (pthread) on the same
// core, and chapter 05 trained 3-7x slower, with nothing saying why. scripts/setup.sh installs
// OpenBLAS; CMake and every trainer start say which library is in use. The pip wheel carries
// its own (MKL on x86), so nothing is looked up there.
struct BlasInfo {
  std::string name;     // "OpenBLAS (openblas-pthread)", "reference BLAS", "MKL", ...
  std::string library;  // the file the process mapped ("" when built into LibTorch)
  bool reference = false;
};

// What LibTorch says it was built with (at::show_config), and for a system BLAS the library
// this process really loaded (/proc/self/maps).
BlasInfo blas_in_use();

// The warning to print when `b` is the reference BLAS, else "".
std::string reference_blas_warning(const BlasInfo& b);

// Note [BLAS threads]
// OpenBLAS (pthread build) starts one thread per core in every process, whatever LibTorch's
// intra-op setting: two ranks on two cores ran four BLAS threads, and a matrix product split
// over two threads rounds differently from one (the PyTorch parity tests, at one intra-op
// thread on both sides, drifted by 6e-8). So every rank gives OpenBLAS LibTorch's intra-op
// thread count (OMP_NUM_THREADS; 02_spawn sets it as torchrun does), unless OPENBLAS_NUM_THREADS
// says otherwise. Returns the count set, or 0 when the BLAS in use is not OpenBLAS.
int match_blas_threads_to_torch();

}  // namespace ddp
