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
// Every process starts a thread per core twice over: LibTorch's intra-op pool (OpenMP) and
// OpenBLAS's own pool. Two ranks on two cores ran up to eight threads, and the thread count
// changes results: a matrix product split over two threads rounds differently from one (the
// PyTorch parity tests drifted by 6e-8; a Slurm task and the same rank under 02_spawn ended
// with different fingerprints). So, in one place for every way of starting a rank (02_spawn,
// torchrun, srun, separate shells): when several ranks share a host and OMP_NUM_THREADS is
// unset, one intra-op thread per rank, as torchrun sets it; and OpenBLAS gets LibTorch's
// intra-op count unless OPENBLAS_NUM_THREADS says otherwise. Returns the intra-op count.
int set_compute_threads(int local_world_size);

}  // namespace ddp
