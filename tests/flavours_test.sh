#!/usr/bin/env bash
# The laptop path: which LibTorch flavours scripts/test.sh builds when the CUDA toolkit is there
# and when it is not (scripts/flavours.sh). Runs `scripts/test.sh --plan`, which resolves the
# flavours, says what it would build and test, and exits: seconds, nothing built or installed.
# Usage: tests/flavours_test.sh variable|namespace|arm64 [repository root]
#   variable : the toolkit hidden by DDP_CUDA_HOME naming an empty folder, shown by a fake one
#   namespace: the real /usr/local/cuda hidden by a tmpfs mounted over it in a private mount
#              namespace, no variable set (as on a laptop); needs root and unshare, else exit 77
#   arm64    : the paths the scripts use resolved for an arm64 machine (DEB_HOST_MULTIARCH, as
#              dpkg-architecture reads it) and for this one, and no x86-64 path or CPU feature
#              assumed in the scripts, the CMake files or the tests
set -uo pipefail
mode=${1:?usage: tests/flavours_test.sh variable|namespace|arm64 [repository root]}
root=${2:-$(cd "$(dirname "$0")/.." && pwd)}
scratch=$(mktemp -d /tmp/ddp-flavours-test.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
source "$(dirname "$0")/expect.sh"  # fail, expect

# What a machine without the toolkit must get from `scripts/test.sh --plan` (no DDP_FLAVOURS).
without_toolkit() {  # NAME, then the command (env and scripts/test.sh --plan)
  local name=$1
  shift
  expect "$name" 0 "^\[test\] skipping the cuda flavour: no CUDA toolkit in " "^\[test\] flavours: cpu \(" \
    "plan: .*build-cpu" "!plan: .*build-cuda" -- "$@"
}

case $mode in
  variable)
    empty=$scratch/no-cuda
    fake=$scratch/fake-cuda
    mkdir -p "$empty" "$fake/bin"
    printf '#!/bin/sh\nexit 0\n' > "$fake/bin/nvcc"
    chmod +x "$fake/bin/nvcc"
    # 1. No toolkit, no flavour asked for: cpu alone, the skip said with its reason, exit 0.
    without_toolkit "toolkit absent, default flavours" \
      env -u DDP_FLAVOURS DDP_CUDA_HOME="$empty" "$root/scripts/test.sh" --plan
    expect "toolkit absent, DDP_FLAVOURS empty" 0 "skipping the cuda flavour" "^\[test\] flavours: cpu \(" -- \
      env DDP_FLAVOURS= DDP_CUDA_HOME="$empty" "$root/scripts/test.sh" --plan
    # 2. No toolkit, both asked for by name (as .ci/run does): an error before anything else.
    expect "toolkit absent, DDP_FLAVOURS=\"cpu cuda\"" 2 "error: the cuda flavour was asked for .*no CUDA toolkit in $empty" \
      "!plan:" -- env DDP_FLAVOURS="cpu cuda" DDP_CUDA_HOME="$empty" "$root/scripts/test.sh" --plan
    expect "toolkit absent, DDP_FLAVOURS=cuda" 2 "error: the cuda flavour was asked for" "!plan:" -- \
      env DDP_FLAVOURS=cuda DDP_CUDA_HOME="$empty" "$root/scripts/test.sh" --plan
    expect "toolkit absent, DDP_FLAVOURS=all" 2 "error: the cuda flavour was asked for" "!plan:" -- \
      env DDP_FLAVOURS=all DDP_CUDA_HOME="$empty" "$root/scripts/test.sh" --plan
    # The same refusal from setup.sh and build.sh, before they install or build anything (both
    # would print more, and take minutes, if they went on).
    expect "toolkit absent, scripts/setup.sh cuda" 2 "^\[setup\] error: the cuda flavour was asked for" "!ready" -- \
      env -u DDP_FLAVOURS DDP_CUDA_HOME="$empty" "$root/scripts/setup.sh" cuda
    expect "toolkit absent, scripts/build.sh cuda" 2 "^\[build\] error: the cuda flavour was asked for" -- \
      env DDP_CUDA_HOME="$empty" "$root/scripts/build.sh" cuda
    # 3. A toolkit there (a stand-in nvcc): both flavours, nothing skipped, with or without the
    #    variable asking for them. Without this, "cpu only, always" would pass the checks above.
    expect "toolkit present, default flavours" 0 "^\[test\] flavours: cpu cuda \(" "plan: .*build-cuda" "!skipping" -- \
      env -u DDP_FLAVOURS DDP_CUDA_HOME="$fake" "$root/scripts/test.sh" --plan
    expect "toolkit present, DDP_FLAVOURS=\"cpu cuda\"" 0 "^\[test\] flavours: cpu cuda \(" "!skipping" -- \
      env DDP_FLAVOURS="cpu cuda" DDP_CUDA_HOME="$fake" "$root/scripts/test.sh" --plan
    expect "unknown flavour" 2 "error: unknown flavour 'gpu'" -- \
      env DDP_FLAVOURS="cpu gpu" DDP_CUDA_HOME="$fake" "$root/scripts/test.sh" --plan
    # .ci/run asks for both flavours by name, so CI cannot skip the cuda build.
    grep -qE '^DDP_FLAVOURS="cpu cuda" exec scripts/test.sh$' "$root/.ci/run" ||
      fail ".ci/run does not run DDP_FLAVOURS=\"cpu cuda\" scripts/test.sh"
    ;;
  namespace)
    # 4. As on a laptop: no variable set, /usr/local/cuda empty. A tmpfs over it, in a mount
    #    namespace of this test's own (the machine's mounts are untouched).
    if [ "$(id -u)" != 0 ]; then echo "SKIPPED: hiding /usr/local/cuda needs root (a mount namespace)"; exit 77; fi
    command -v unshare > /dev/null || { echo "SKIPPED: no unshare (util-linux)"; exit 77; }
    if ! unshare -m --propagation private mount -t tmpfs -o size=1m ddp-probe "$scratch" 2> "$scratch/err"; then
      echo "SKIPPED: cannot mount a tmpfs in a mount namespace here: $(cat "$scratch/err")"; exit 77
    fi
    [ -e /usr/local/cuda ] || echo "note: this machine has no /usr/local/cuda: nothing to hide, checking as it is"
    hide='[ ! -e /usr/local/cuda ] || mount -t tmpfs -o size=1m ddp-no-cuda /usr/local/cuda || exit 3
          [ ! -e /usr/local/cuda/bin/nvcc ] || { echo "the toolkit is still visible"; exit 3; }
          exec "$@"'
    without_toolkit "/usr/local/cuda hidden by a mount namespace, no variable" \
      env -u DDP_FLAVOURS -u DDP_CUDA_HOME unshare -m --propagation private bash -c "$hide" _ "$root/scripts/test.sh" --plan
    expect "/usr/local/cuda hidden, DDP_FLAVOURS=\"cpu cuda\"" 2 "error: the cuda flavour was asked for .*no CUDA toolkit in /usr/local/cuda" -- \
      env -u DDP_CUDA_HOME DDP_FLAVOURS="cpu cuda" unshare -m --propagation private bash -c "$hide" _ "$root/scripts/test.sh" --plan
    ;;
  arm64)
    # 5. A learner on arm64 (Debian 12 in a VM on an Apple-silicon Mac): Debian's libtorch-dev and
    #    OpenBLAS live under /usr/lib/aarch64-linux-gnu there. This machine resolves them for its own
    #    architecture, whatever it is, and for arm64's when told it is one.
    here=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
    expect "this machine ($here)" 0 "plan: the cpu flavour's LibTorch from /usr/lib/$here/cmake/Torch, its BLAS /usr/lib/$here/openblas-pthread/libblas.so.3\$" -- \
      env -u DEB_HOST_MULTIARCH DDP_FLAVOURS=cpu "$root/scripts/test.sh" --plan
    expect "an arm64 machine" 0 "plan: the cpu flavour's LibTorch from /usr/lib/aarch64-linux-gnu/cmake/Torch, its BLAS /usr/lib/aarch64-linux-gnu/openblas-pthread/libblas.so.3\$" -- \
      env DEB_HOST_MULTIARCH=aarch64-linux-gnu DDP_FLAVOURS=cpu "$root/scripts/test.sh" --plan
    # Nothing else names x86-64: a path or a flag is asked of the machine (flavours.sh, CMake's
    # CMAKE_LIBRARY_ARCHITECTURE), a CPU feature asked only where the architecture has it
    # (tests/kernels.cpp, inside #if defined(__x86_64__); scripts/kernels.sh, whose grep of /proc/cpuinfo finds
    # no avx2 on an arm64 CPU).
    hits=$(cd "$root" && git grep -nE 'x86_64-linux-gnu|__builtin_cpu_(supports|init)|-m(avx|sse|arch)|/proc/cpuinfo' -- \
             scripts '*.sh' '*CMakeLists.txt' '*.cmake' '*.cpp' '*.h' '*.py' ':!tests/flavours_test.sh')
    unguarded=$(grep -v '^tests/kernels.cpp:' <<< "$hits" | grep -v '^scripts/kernels.sh:.*/proc/cpuinfo' || true)
    [ -z "$unguarded" ] || fail "x86-64 assumed outside the guarded places: $unguarded"
    grep -q '^#if defined(__x86_64__)' "$root/tests/kernels.cpp" || fail "tests/kernels.cpp asks x86 features without #if defined(__x86_64__)"
    ;;
  *) echo "unknown mode '$mode': use variable, namespace or arm64" >&2; exit 2 ;;
esac
[ $failures = 0 ] || { echo "$failures check(s) FAILED"; exit 1; }
echo "all checks passed"
