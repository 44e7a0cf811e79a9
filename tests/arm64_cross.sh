#!/usr/bin/env bash
# The course built for arm64 against Debian's own arm64 LibTorch, on an x86-64 machine, and its
# checks run there under emulation: what an arm64 learner (Debian 12 in a VM on an Apple-silicon
# Mac) builds and sees. By hand, not in CI: it downloads about 1 GB and takes 15-30 minutes
# (docs/flavours.md, "On arm64").
# Usage (as root, on Debian 12): tests/arm64_cross.sh [work folder, default /tmp/ddp-arm64]
#   1. Debian's arm64 packages the cpu flavour needs, unpacked into <work>/sysroot (mmdebstrap
#      --variant=extract: nothing of them runs);
#   2. the course cross-compiled with aarch64-linux-gnu-g++ into <work>/build-cpu, CMake finding
#      LibTorch where scripts/flavours.sh says an arm64 machine has it;
#   3. qemu-user registered for arm64 programs (binfmt_misc), and, run under it, the tests that
#      say where the recorded figures cannot hold, and chapter 03's README example.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-/tmp/ddp-arm64}
sysroot=$work/sysroot
build=$work/build-cpu  # the name the README checks expect of the cpu flavour's build
[ "$(id -u)" = 0 ] || { echo "arm64_cross: needs root (packages, binfmt_misc)" >&2; exit 2; }
mkdir -p "$work"

DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap g++-aarch64-linux-gnu qemu-user-static > /dev/null
if [ ! -d "$sysroot/usr/lib/aarch64-linux-gnu/cmake/Torch" ]; then
  echo "[arm64] unpacking Debian's arm64 packages into $sysroot (a few minutes)"
  mmdebstrap --variant=extract --architectures=arm64 \
    --include=libtorch-dev,libgloo-dev,libopenblas0-pthread,libcli11-dev,libgtest-dev,zlib1g-dev,nlohmann-json3-dev,libstdc++-12-dev,libc6-dev \
    bookworm "$sysroot" http://deb.debian.org/debian > "$work/mmdebstrap.log" 2>&1
  # What the packages' scripts would have done: libblas.so.3 chosen (update-alternatives), and
  # absolute links made to point inside the sysroot.
  ln -sfn openblas-pthread/libblas.so.3 "$sysroot/usr/lib/aarch64-linux-gnu/libblas.so.3"
  ln -sfn openblas-pthread/liblapack.so.3 "$sysroot/usr/lib/aarch64-linux-gnu/liblapack.so.3"
  ln -sfn openblas-pthread/libopenblas.so.0 "$sysroot/usr/lib/aarch64-linux-gnu/libopenblas.so.0"
  find "$sysroot" -type l -lname '/*' | while read -r l; do ln -sfn "$sysroot$(readlink "$l")" "$l"; done
fi

prefix=$(DEB_HOST_MULTIARCH=aarch64-linux-gnu bash -c "source '$root/scripts/flavours.sh'; cpu_torch_prefix")
cat > "$work/toolchain.cmake" <<EOF
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_SYSROOT $sysroot)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH $sysroot)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# gtest_discover_tests lists the tests by running them: under qemu, with the sysroot's loader.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64-static -L $sysroot)
EOF
echo "[arm64] configuring against $prefix (in $sysroot)"
cmake -S "$root" -B "$build" -DCMAKE_TOOLCHAIN_FILE="$work/toolchain.cmake" -DCMAKE_PREFIX_PATH="$prefix" > "$work/configure.log" 2>&1 ||
  { cat "$work/configure.log"; exit 1; }
grep -E "^-- (LibTorch|Gloo|BLAS)" "$work/configure.log"
echo "[arm64] building (about as long as a native build)"
cmake --build "$build" -j2 > "$work/build.log" 2>&1 || { tail -n 40 "$work/build.log"; exit 1; }
file "$build/03_manual_allreduce" | sed 's/^/[arm64] /'

# Run arm64 programs: binfmt_misc hands them to qemu, which finds the arm64 loader and
# libraries in the sysroot (QEMU_LD_PREFIX, inherited by every process they start).
mountpoint -q /proc/sys/fs/binfmt_misc || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
[ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] || cat /usr/lib/binfmt.d/qemu-aarch64.conf > /proc/sys/fs/binfmt_misc/register
export QEMU_LD_PREFIX=$sysroot
echo "[arm64] under emulation: the tests that say where the recorded figures cannot hold"
"$build/tests/ddp_tests" --gtest_filter='Pinned.TheRecordedFiguresHoldOnlyOnTheRecordedKernels:Readme.OnOtherKernels*:Readme.FiguresAre*'
echo "[arm64] under emulation: chapter 03's first README example, as a learner runs it"
(cd "$work" && ln -sfn "$root/03_manual_allreduce" . && "$build/02_spawn" --world-size 2 --timeout 300 -- "$build/03_manual_allreduce" --timeout 300)
