#!/usr/bin/env bash
# Configures and builds one LibTorch flavour into build-<flavour>/ (after scripts/setup.sh).
# Usage: scripts/build.sh cpu|cuda [make targets...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
flavour=${1:?usage: scripts/build.sh cpu|cuda [targets]}
shift
venv=${DDP_VENV:-$root/.venv}
build=$root/build-$flavour
case $flavour in
  cpu)  prefix=/usr/lib/x86_64-linux-gnu/cmake/Torch ; extra=() ;;
  cuda) prefix=$("$venv/bin/python" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null | tail -n 1)
        export CUDACXX=${CUDACXX:-/usr/local/cuda/bin/nvcc}
        extra=(-DCUDAToolkit_ROOT=/usr/local/cuda -DDDP_TORCHRUN_PYTHON="$venv/bin/python") ;;
  *) echo "unknown flavour '$flavour': use cpu or cuda" >&2; exit 2 ;;
esac
if [ ! -f "$build/Makefile" ]; then
  mkdir -p "$build"
  if ! cmake -S "$root" -B "$build" -DCMAKE_PREFIX_PATH="$prefix" "${extra[@]}" > "$build/configure.log" 2>&1; then
    cat "$build/configure.log"
    echo "configure FAILED for flavour $flavour" >&2
    exit 1
  fi
  grep -E "^-- (LibTorch|Gloo|CUDA|NCCL|torchrun)" "$build/configure.log" || true
elif [ $# -gt 0 ]; then
  # Building named targets skips CMake's own check for a changed CMakeLists.txt: do it here.
  cmake "$build" > "$build/configure.log" 2>&1 || { cat "$build/configure.log"; exit 1; }
fi
cmake --build "$build" -j2 ${1:+--target "$@"}
