// provides: blas_in_use(), read from LibTorch's build config and this process's mapped libraries.
#include "common/compute/blas.h"

#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <dlfcn.h>

#include <cstdlib>

#include <fstream>

namespace ddp {
namespace {

std::string build_setting(const std::string& config, const std::string& key) {
  const size_t at = config.find(key + "=");
  if (at == std::string::npos) return "";
  const size_t from = at + key.size() + 1;
  return config.substr(from, config.find_first_of(", \n", from) - from);
}

// The path of the first mapped file whose name contains `needle`.
std::string mapped_library(const std::string& needle) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    const size_t slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    if (path.substr(path.rfind('/') + 1).find(needle) != std::string::npos) return path;
  }
  return "";
}

}  // namespace

BlasInfo blas_in_use() {
  const std::string info = build_setting(at::show_config(), "BLAS_INFO");
  if (info != "generic") return {info == "mkl" ? "MKL (inside LibTorch)" : info + " (inside LibTorch)", "", false};
  const std::string lib = mapped_library("libblas.so");
  if (lib.find("openblas") != std::string::npos) {
    const size_t end = lib.rfind('/'), begin = lib.rfind('/', end - 1) + 1;
    return {"OpenBLAS (" + lib.substr(begin, end - begin) + ")", lib, false};
  }
  if (lib.find("blis") != std::string::npos) return {"BLIS", lib, false};
  if (lib.find("atlas") != std::string::npos) return {"ATLAS", lib, false};
  if (lib.find("mkl") != std::string::npos) return {"MKL", lib, false};
  if (lib.empty()) return {"unknown (no libblas mapped)", "", false};
  return {"reference BLAS", lib, true};
}

std::string reference_blas_warning(const BlasInfo& b) {
  if (!b.reference) return "";
  return "warning: LibTorch computes on the reference BLAS (" + b.library +
         "), 3-7x slower than OpenBLAS: run scripts/setup.sh, or apt-get install libopenblas0-pthread "
         "(see Note [Which BLAS] in common/compute/blas.h)";
}

int set_compute_threads(int local_world_size) {
  if (local_world_size > 1 && std::getenv("OMP_NUM_THREADS") == nullptr) at::set_num_threads(1);
  const int n = at::get_num_threads();
  using SetThreads = void (*)(int);
  auto set_blas = reinterpret_cast<SetThreads>(::dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  if (set_blas != nullptr && std::getenv("OPENBLAS_NUM_THREADS") == nullptr) set_blas(n);
  return n;
}

}  // namespace ddp
