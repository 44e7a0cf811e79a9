#!/usr/bin/env bash
# Installs what the course needs, once; quiet and quick when everything is already there.
#   cpu  : Debian packages (compiler, CMake, libtorch-dev 1.13 with Gloo, OpenBLAS, CLI11, GoogleTest, zlib,
#          python3-torch 1.13, the reference the parity tests compare against, python3-torchvision
#          0.14, whose model definitions bench/profile_model.py profiles, and the real Fashion-MNIST
#          from dataset-fashion-mnist)
#   cuda : the above, plus a project-local virtualenv (.venv) with PyPI torch==2.11.0 (CUDA 13.0,
#          NCCL 2.28.9), whose LibTorch CMake finds via torch.utils.cmake_prefix_path, and
#          tensorboard, whose reader checks the trainer's event files, and torchft 0.2.0, which
#          chapter 08 is held against; it needs the CUDA 13.0
#          toolkit in $DDP_CUDA_HOME (default /usr/local/cuda)
# Usage: scripts/setup.sh [cpu] [cuda] [all]   (default: $DDP_FLAVOURS, else every flavour this
#        machine can build, saying which it skipped; one named that cannot be built: exit 2)
#        DDP_SETUP_TORCH=later: everything but torch's wheel, which a second call installs (what
#        scripts/test.sh does, beside the cpu build: Note [The wheel beside the cpu build] there);
#        DDP_SETUP_LOG: the installers' log (default setup.log).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${DDP_VENV:-$root/.venv}
torch_pip_version=2.11.0
torchft_version=0.2.0

source "$root/scripts/progress.sh"
source "$root/scripts/flavours.sh"
log=${DDP_SETUP_LOG:-$root/setup.log}  # what the installers print; named when they take long or fail
say() { echo "[setup] $*"; }
die() { echo "[setup] error: $*" >&2; exit 2; }

# Before installing anything: a flavour asked for that cannot be built here stops it (exit 2).
resolve_flavours "[setup]" ${*:-${DDP_FLAVOURS:-}}
[ -z "$skipped" ] || say "skipping the ${skipped%%:*} flavour: ${skipped#*: }"

# Note [Waiting for apt]
# ~~~~~~~~~~~~~~~~~~~~~
# A fresh VM runs apt itself at first boot (unattended-upgrades, cloud-init), for minutes; apt
# then refuses a second apt at once ("E: Could not get lock /var/lib/dpkg/lock-frontend. It is
# held by process 812 (unattended-upgr)"). Then this tries again every 5 s, saying so with the
# line apt gave, for up to $DDP_APT_WAIT seconds (default 600); past that, or on any other error,
# it stops with apt's own error lines. The retry is ours rather than apt's DPkg::Lock::Timeout:
# Debian 12's apt (2.6.1) waits so for dpkg's lock, but `apt-get update -o DPkg::Lock::Timeout=6`
# with the lists' lock held was refused in 0.6 s. tests/setup_test.sh plays a busy apt.
apt_wait=${DDP_APT_WAIT:-600}
[[ $apt_wait =~ ^[0-9]+$ ]] || die "DDP_APT_WAIT must be a number of seconds, not '$apt_wait'"
apt_busy='Could not get lock|Unable to acquire the dpkg frontend lock|Unable to lock (the )?(directory|administration)'
apt_install() {  # runs in run_step, its output in the log
  local start=$SECONDS out
  while :; do
    out=$(apt-get update -qq 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" 2>&1) &&
      { printf '%s\n' "$out"; return 0; }
    printf '%s\n' "$out"
    local busy
    busy=$(printf '%s\n' "$out" | grep -E "$apt_busy" | head -n 1)
    [ -n "$busy" ] || return 1
    if [ $((SECONDS - start)) -ge "$apt_wait" ]; then
      echo "E: apt was still busy after ${apt_wait} s (DDP_APT_WAIT)"
      return 1
    fi
    echo "waiting for another apt to finish ($((SECONDS - start)) s of ${apt_wait}): ${busy#E: }"
    sleep 5
  done
}

# 1. Debian packages (as root; apt-get update only when something is missing).
# libopenblas0-pthread: Debian's libtorch computes on whatever libblas.so.3 is installed, and
# --no-install-recommends would leave the reference BLAS, 3-7x slower (Note [Which BLAS] in
# common/compute/blas.h). The pthread build measured best with 2 ranks on 2 cores
# (docs/measured.md, "The BLAS under Debian's LibTorch").
# iproute2: `ip` and `tc`, which --link uses to make simulated nodes hosts (Note [Nodes as hosts]).
# python3-torchvision: the model definitions (ResNets, ...) bench/profile_model.py writes profiles
# from, matching python3-torch; 7 packages, 1.3 MB, about 6 s.
# python3-matplotlib: the pictures of bench/ and 05's README (bench/plot_step.py and its kin).
# clang: the compiler scripts/build.sh uses, 50 MB to download (Note [Compiled by clang] there).
# patch: the exercise tests apply solutions with it and hold their line numbers (exercise_verify.sh).
# patchelf: the cpu build's copy of Debian's libtorch_cpu without the libraries it never calls
# (Note [Debian's LibTorch as --as-needed links it] in CMakeLists.txt).
packages=(g++ clang make cmake binutils patchelf libtorch-dev libgloo-dev libopenblas0-pthread libcli11-dev libgtest-dev zlib1g-dev
          nlohmann-json3-dev python3-venv python3-torch python3-torchvision
          python3-matplotlib dataset-fashion-mnist iproute2 patch)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || die "missing Debian packages: ${missing[*]}; run this script as root (or install them)"
  # apt's own lines are many and long: a line every 30 s says it is still going, and each wait
  # for another apt is said.
  run_step "[setup]" "installing ${missing[*]} with apt (minutes on a fresh machine)" "$log" 's/^(waiting for .*)/\1/p' \
    apt_install "${missing[@]}" ||
    die "apt-get failed (all it printed: $log):
$(grep -E '^(E|Err|W): ' "$log" | awk '!seen[$0]++' | tail -n 4)"
fi

# libblas.so.3 and liblapack.so.3 are chosen by update-alternatives; OpenBLAS wins in auto mode,
# but a manual choice of the reference BLAS would stay: point both at OpenBLAS.
arch=$(multiarch)
for lib in libblas.so.3 liblapack.so.3; do
  want=$(openblas_library $lib)
  if [ -e "$want" ] && [ "$(readlink -f "/usr/lib/$arch/$lib")" != "$(readlink -f "$want")" ]; then
    [ "$(id -u)" = 0 ] || die "/usr/lib/$arch/$lib is not OpenBLAS: run this script as root, or: update-alternatives --set $lib-$arch $want"
    say "pointing $lib at OpenBLAS"
    update-alternatives --quiet --set "$lib-$arch" "$want"
  fi
done

# 2. The CUDA flavour: LibTorch from the pip wheel, and the CUDA toolkit it was built with.
# The virtualenv and TensorBoard's reader first: the cpu build's configure looks for the reader
# (scripts/build.sh), so it is there before the cpu build starts; torch's wheel last.
torch_later=${DDP_SETUP_TORCH:-now}
[[ $torch_later =~ ^(now|later)$ ]] || die "DDP_SETUP_TORCH must be now or later, not '$torch_later'"
if [[ " $flavours " == *" cuda "* ]]; then
  if [ ! -x "$venv/bin/pip" ]; then  # also a virtualenv whose creation was cut short
    say "creating the virtualenv $venv"
    /usr/bin/python3 -m venv "$venv" >> "$log" 2>&1 || die "creating the virtualenv $venv failed: see $log"
  fi
  # TensorBoard's own reader checks the trainer's event files in the tests.
  if ! "$venv/bin/python" -c "import tensorboard" 2>/dev/null; then
    run_step "[setup]" "adding tensorboard to $venv" "$log" 's/^(Collecting [^ ]+).*/\1/p' \
      "$venv/bin/pip" install --disable-pip-version-check --progress-bar off tensorboard || die "installing tensorboard failed: see $log"
  fi
  if [ "$torch_later" = later ]; then
    say "torch==$torch_pip_version's wheel: by a second call (DDP_SETUP_TORCH=later)"
  elif ! "$venv/bin/python" -c "import torch,sys; sys.exit(torch.__version__.split('+')[0] != '$torch_pip_version')" 2>/dev/null; then
    # One line per package pip collects (torch and its CUDA wheels, about 20).
    run_step "[setup]" "installing torch==$torch_pip_version into $venv (4.6 GB: minutes to download)" "$log" \
      's/^(Collecting [^ ]+).*/\1/p; s/^(Installing collected packages).*/\1/p; s/^(Successfully installed).*/\1/p' \
      "$venv/bin/pip" install --disable-pip-version-check --progress-bar off "torch==$torch_pip_version" ||
      die "installing torch into the virtualenv failed: see $log"
  fi
  # torchft, PyTorch's fault-tolerance library, which chapter 08 is held against (it needs this
  # torch, >= 2.7, and OpenTelemetry's packages beside it): after torch, which it would pull in.
  # (Looked for as a folder: importing it would import torch, a second of CPU on every call.)
  if [ "$torch_later" != later ] && ! compgen -G "$venv/lib/python3*/site-packages/torchft/__init__.py" > /dev/null; then
    run_step "[setup]" "adding torchft==$torchft_version to $venv" "$log" 's/^(Collecting [^ ]+).*/\1/p' \
      "$venv/bin/pip" install --disable-pip-version-check --progress-bar off "torchft==$torchft_version" \
      opentelemetry-api opentelemetry-sdk opentelemetry-exporter-otlp || die "installing torchft failed: see $log"
  fi
fi
if [ "$torch_later" = later ] && [[ " $flavours " == *" cuda "* ]]; then
  say "ready: ${flavours}, but for torch's wheel"
else
  say "ready: ${flavours}"
fi
