# Sourced by setup.sh, build.sh and test.sh: which LibTorch flavours this machine can build.
#   cpu  : Debian's libtorch-dev; setup.sh installs it on any Debian 12 machine.
#   cuda : PyPI torch with CUDA 13.0, which needs the CUDA 13.0 toolkit (nvcc, nccl.h) in
#          $DDP_CUDA_HOME (default /usr/local/cuda). A laptop rarely has one; CI's machines do.
#
#   resolve_flavours LABEL [WORDS...]   (LABEL starts its error lines: "[setup]")
#     No words: every flavour this machine can build; `skipped` says which one it cannot and why.
#     Words (cpu, cuda, all = cpu cuda): exactly those; one that cannot be built here is an error,
#     exit 2, before anything is installed or built.
#     Sets `flavours` ("cpu" or "cpu cuda") and `skipped` ("" or "cuda: <why>").
cuda_home=${DDP_CUDA_HOME:-/usr/local/cuda}

# Debian's multiarch folder name of this machine (under /usr/lib): aarch64-linux-gnu on arm64.
# DEB_HOST_MULTIARCH in the environment wins, as it does for dpkg-architecture itself (the tests
# resolve an arm64 machine's paths that way); gcc answers where dpkg-dev is not installed.
multiarch() {
  [ -z "${DEB_HOST_MULTIARCH:-}" ] || { echo "$DEB_HOST_MULTIARCH"; return; }
  dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch
}
# Where Debian's libtorch-dev keeps its CMake config (the cpu flavour's LibTorch).
cpu_torch_prefix() { echo "/usr/lib/$(multiarch)/cmake/Torch"; }
# Debian's OpenBLAS (pthread build) of one of the BLAS alternatives: libblas.so.3 or liblapack.so.3.
openblas_library() { echo "/usr/lib/$(multiarch)/openblas-pthread/$1"; }

# Why the cuda flavour cannot be built here, or nothing when it can.
cuda_missing() {
  [ -x "$cuda_home/bin/nvcc" ] ||
    echo "no CUDA toolkit in $cuda_home (no bin/nvcc there; set DDP_CUDA_HOME if it is elsewhere)"
}

resolve_flavours() {
  local label=$1 f why
  shift
  local words="$*"
  skipped=""
  if [ -z "$words" ]; then
    flavours=cpu
    why=$(cuda_missing)
    if [ -n "$why" ]; then
      skipped="cuda: $why"
    else
      flavours="cpu cuda"
    fi
    return 0
  fi
  [ "$words" = all ] && words="cpu cuda"
  flavours=""
  for f in $words; do
    case $f in
      cpu) ;;
      cuda) why=$(cuda_missing)
            if [ -n "$why" ]; then
              echo "$label error: the cuda flavour was asked for ('$words'), but it cannot be built here: $why." >&2
              echo "$label   install the CUDA 13.0 toolkit, point DDP_CUDA_HOME at one, or ask for cpu only (DDP_FLAVOURS=cpu scripts/test.sh, scripts/setup.sh cpu)." >&2
              exit 2
            fi ;;
      *) echo "$label error: unknown flavour '$f': use cpu, cuda or all" >&2; exit 2 ;;
    esac
    [[ " $flavours " == *" $f "* ]] || flavours="${flavours:+$flavours }$f"
  done
}
