// provides: make_reproducible(). See Note [Reproducible GPU runs].
#include "common/compute/reproducible.h"

#include <ATen/Context.h>

#include <cstdlib>

namespace ddp {

void make_reproducible(bool on) {
  if (on) ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
  at::globalContext().setDeterministicCuDNN(on);
  at::globalContext().setBenchmarkCuDNN(false);  // benchmarking picks by timing: not repeatable
  at::globalContext().setDeterministicAlgorithms(on, /*warn_only=*/true);
}

}  // namespace ddp
