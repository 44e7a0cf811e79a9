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
# Note [Compiled by clang]
# ~~~~~~~~~~~~~~~~~~~~~~~~
# Every file that includes LibTorch's headers pays for the templates those headers instantiate.
# GCC 12 instantiates them again in each file, even an empty one given the precompiled header
# (6 s of CPU, 89 % of it "template instantiation" by -ftime-report); clang does it once, in the
# precompiled header (-fpch-instantiate-templates, which CMake passes it). Measured on 2 idle
# cores (2026-11-28, each compile timed, the same flags), GCC 12 -> clang 14: the cpu flavour's
# whole build 336 s -> 239 s of CPU (195 s -> 127 s on the clock), the cuda flavour's 379 s ->
# 248 s (218 s -> 129 s); the precompiled header 35.1 s -> 16.2 s, 05_ddp/ddp.cpp (which
# exercise 05.2 edits) 10.3 s -> 5.1 s, 01_join_group/main.cpp 8.9 s -> 6.0 s. The arithmetic is
# LibTorch's, and ours is IEEE without -ffast-math: the same bits from either compiler (nine
# runs' fingerprints compared, chapters 03-05; the parity tests against PyTorch hold the rest).
# scripts/setup.sh installs Debian's clang; without it, the default C++ compiler, saying so.
compiler=() want=$(command -v clang++ || true)
if [ -n "$want" ]; then
  compiler=(-DCMAKE_CXX_COMPILER="$want")
else
  echo "[build] no clang++ (scripts/setup.sh installs it): compiling with the default C++ compiler, about 1.5 times the CPU time"
fi
# The flavour's own LibTorch, named (find_package would keep whichever it found first).
torch_dir=$prefix
[ -f "$torch_dir/TorchConfig.cmake" ] || torch_dir=$prefix/Torch
# A build folder configured with another compiler (GCC before this Note) or another LibTorch is
# configured anew, from an empty cache: given another compiler, CMake drops its cache itself and
# configures again without the settings below (seen: the parity tests skipped, their Python
# forgotten, and the cuda flavour's folder found Debian's LibTorch 1.13 and kept it).
if [ -f "$build/CMakeCache.txt" ]; then
  had=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")
  had_torch=$(sed -n 's/^Torch_DIR:[A-Z]*=//p' "$build/CMakeCache.txt")
  if { [ -n "$want" ] && [ "$(readlink -f "$had")" != "$(readlink -f "$want")" ]; } || [ ! -x "$had" ]; then
    echo "[build] ${build#"$root"/} was configured with ${had:-another compiler}: configuring it anew with ${want:-the default} (everything compiles again)"
    rm -f "$build/CMakeCache.txt"
  elif [ "$(readlink -f "$had_torch")" != "$(readlink -f "$torch_dir")" ]; then
    echo "[build] ${build#"$root"/} was configured with the LibTorch of ${had_torch:-another place}: configuring it anew with $torch_dir's (everything compiles again)"
    rm -f "$build/CMakeCache.txt"
  fi
fi
# Configure every time (a few seconds when nothing changed): building named targets would
# otherwise skip CMake's own check for a changed CMakeLists.txt.
first=$([ -f "$build/Makefile" ] && echo no || echo yes)
mkdir -p "$build"
if ! cmake -S "$root" -B "$build" "${compiler[@]}" -DCMAKE_PREFIX_PATH="$prefix" -DTorch_DIR="$torch_dir" "${extra[@]}" > "$build/configure.log" 2>&1; then
  cat "$build/configure.log"
  echo "configure FAILED for flavour $flavour" >&2
  exit 1
fi
[ "$first" = yes ] && { grep -E "^-- (LibTorch|Compiler|Gloo|CUDA|NCCL|BLAS|Linker|torchrun|Python reference|TensorBoard|Slurm)|BLAS:" "$build/configure.log" || true; }
cmake --build "$build" -j2 ${1:+--target "$@"}
