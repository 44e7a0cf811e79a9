#!/usr/bin/env bash
# Configures and builds one LibTorch flavour into build-<flavour>/ (after scripts/setup.sh).
# Usage: scripts/build.sh cpu|cuda [make targets...]   (cuda: the toolkit in $DDP_CUDA_HOME,
#        default /usr/local/cuda; without one, exit 2 before anything is built)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
flavour=${1:?usage: scripts/build.sh cpu|cuda [targets]}
shift
source "$root/scripts/flavours.sh"
resolve_flavours "[build]" "$flavour"
venv=${DDP_VENV:-$root/.venv}
build=$root/build-$flavour
case $flavour in
  cpu)  prefix=$(cpu_torch_prefix)
        # Debian's python3-torch: the same 1.13. The real-Slurm tests run 06_slurm/cpu_gloo.sbatch,
        # which runs this build's 05_ddp. The tests run once per CI (DDP_ONCE_TESTS) run here.
        extra=(-DDDP_REFERENCE_PYTHON=/usr/bin/python3 -DDDP_SLURM_TESTS=ON -DDDP_ONCE_TESTS=ON) ;;
  cuda) prefix=$("$venv/bin/python" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null | tail -n 1)
        export CUDACXX=${CUDACXX:-$cuda_home/bin/nvcc}
        extra=(-DCUDAToolkit_ROOT="$cuda_home" -DDDP_TORCHRUN_PYTHON="$venv/bin/python"
              -DDDP_REFERENCE_PYTHON="$venv/bin/python" -DDDP_ONCE_TESTS=OFF) ;;
  *) echo "unknown flavour '$flavour': use cpu or cuda" >&2; exit 2 ;;
esac
# TensorBoard's reader, for the event-file test, from the virtualenv when it has one (setup.sh
# cuda installs it); without it that test skips and says why.
tb=""
"$venv/bin/python" -c "import tensorboard" 2>/dev/null && tb=$venv/bin/python
extra+=(-DDDP_TENSORBOARD_PYTHON="$tb")
# Configure every time (a few seconds when nothing changed): building named targets would
# otherwise skip CMake's own check for a changed CMakeLists.txt.
first=$([ -f "$build/Makefile" ] && echo no || echo yes)
mkdir -p "$build"
if ! cmake -S "$root" -B "$build" -DCMAKE_PREFIX_PATH="$prefix" "${extra[@]}" > "$build/configure.log" 2>&1; then
  cat "$build/configure.log"
  echo "configure FAILED for flavour $flavour" >&2
  exit 1
fi
[ "$first" = yes ] && { grep -E "^-- (LibTorch|Gloo|CUDA|NCCL|BLAS|Linker|torchrun|Python reference|TensorBoard|Slurm)|BLAS:" "$build/configure.log" || true; }
cmake --build "$build" -j2 ${1:+--target "$@"}
