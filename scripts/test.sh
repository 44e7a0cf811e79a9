#!/usr/bin/env bash
# Sets up, builds and runs every test (ctest), for each LibTorch flavour:
#   cpu  = Debian libtorch-dev 1.13 (Gloo)      -> build-cpu/
#   cuda = PyPI torch 2.11.0 (CUDA 13, NCCL)    -> build-cuda/  (GPU tests skip without a GPU;
#          needs the CUDA 13.0 toolkit in $DDP_CUDA_HOME, default /usr/local/cuda)
# The second flavour builds (nice 19) while the first one's tests run.
# Usage: scripts/test.sh [--plan]
#   Without DDP_FLAVOURS: the flavours this machine can build (cpu always, cuda with the toolkit),
#   saying which one it skipped and why. DDP_FLAVOURS="cpu cuda" (CI), cpu or cuda: exactly those;
#   one that cannot be built here stops it at once, exit 2. --plan: say what it would set up,
#   build and test, and exit.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
plan=no
case ${1:-} in
  "") ;;
  --plan) plan=yes ;;
  *) echo "[test] error: unknown argument '$1' (usage: scripts/test.sh [--plan]; flavours: DDP_FLAVOURS)" >&2; exit 2 ;;
esac
source "$root/scripts/flavours.sh"
resolve_flavours "[test]" ${DDP_FLAVOURS:-}
# Said at the start and again in the summary: "the cuda flavour: no CUDA toolkit in ...".
skip_what=""
[ -z "$skipped" ] || skip_what="the ${skipped%%:*} flavour: ${skipped#*: }"
[ -z "$skip_what" ] || echo "[test] skipping $skip_what"
echo "[test] flavours: $flavours$([ -n "${DDP_FLAVOURS:-}" ] && echo " (DDP_FLAVOURS)" || echo " (what this machine can build)")"
if [ $plan = yes ]; then
  for f in $flavours; do
    echo "[test] plan: set up $f, build build-$f/, run its tests (ctest)"
  done
  # The paths the cpu flavour depends on, for this machine's architecture (flavours.sh).
  echo "[test] plan: the cpu flavour's LibTorch from $(cpu_torch_prefix), its BLAS $(openblas_library libblas.so.3)"
  exit 0
fi

"$root/scripts/setup.sh" $flavours
status=0
# A throw-away Slurm for chapter 06's tests (label slurm), stopped again when this script ends.
# Without root or namespaces they skip, and say why.
if [[ " $flavours " == *" cpu "* ]]; then
  if why=$("$root/scripts/local_slurm.sh" up 2>&1); then
    echo "$why"
    eval "$("$root/scripts/local_slurm.sh" env)"
    trap '"$root/scripts/local_slurm.sh" down >/dev/null 2>&1 || true' EXIT
  else
    echo "$why"
    export DDP_SLURM_UNAVAILABLE="${why//$'\n'/ }"
  fi
fi
source "$root/scripts/progress.sh"
# Builds one flavour (at the priority given: "nice -n 19" or none) and names its LibTorch.
build_flavour() {
  local f=$1 log=$root/build-$1.log usual
  shift
  usual="building everything: about 6 (cpu) or 7 (cuda) minutes on 2 cores the first time"
  [ -f "$root/build-$f/Makefile" ] && usual="building what changed"
  if ! run_step "[build $f]" "$usual" "$log" "$BUILD_FILTER" "$@" "$root/scripts/build.sh" "$f"; then
    tail -n 60 "$log"
    echo "== [$f] build FAILED (full log: $log)"
    return 1
  fi
  grep -E "^-- (LibTorch|Gloo|CUDA|NCCL|BLAS|Linker|torchrun|Python reference|TensorBoard|Slurm)|BLAS:" "$log" | sed "s|^|[build $f] |" || true
}
read -r -a fl <<< "$flavours"
logs=()
build_flavour "${fl[0]}" || exit 1
for i in "${!fl[@]}"; do
  f=${fl[$i]}
  next=${fl[$((i + 1))]:-}
  # The tests wait on processes, timeouts and Slurm a quarter of the time: the next flavour builds
  # meanwhile at the lowest priority (nice 19), on what they leave idle, and cannot slow them.
  if [ -n "$next" ]; then
    build_flavour "$next" nice -n 19 &
    next_build=$!
  fi
  # Every line of ctest's as it comes (one per test), and a word when none came for 30 s.
  tlog=$root/build-$f/ctest.log
  run_step "[test $f]" "running every test: about 9-10 minutes on 2 cores" "$tlog" p \
    bash -c "cd '$root/build-$f' && ctest --output-on-failure -j2 --timeout 300" || status=1
  logs+=("$root/build-$f.log" "$tlog")
  if [ -n "$next" ] && ! wait "$next_build"; then
    echo "== logs: ${logs[*]}"
    exit 1
  fi
done
echo "== logs: ${logs[*]}"
echo "== flavours tested: $flavours: $([ $status = 0 ] && echo "every test passed" || echo "some tests FAILED (above)")"
[ -z "$skip_what" ] || echo "== skipped $skip_what"
exit $status
