#!/usr/bin/env bash
# Sets up, builds (CPU/Gloo) and runs the course (01-06), each chapter at world size 2.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/progress.sh"
"$root/scripts/setup.sh" cpu
log=$root/build-cpu.log
usual="building the chapters: about 4 minutes on 2 cores the first time, seconds when built"
[ -f "$root/build-cpu/Makefile" ] && usual="building what changed"
if ! run_step "[build cpu]" "$usual" "$log" "$BUILD_FILTER" \
    "$root/scripts/build.sh" cpu 01_join_group 02_spawn 03_manual_allreduce 04_grad_hooks 05_ddp 06_slurm; then
  tail -n 60 "$log"
  echo "build FAILED (full log: $log)" >&2
  exit 1
fi
"$root/scripts/course.sh" "$root/build-cpu"
echo "(the build's full log: $log)"
