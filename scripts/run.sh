#!/usr/bin/env bash
# Sets up, builds (CPU/Gloo) and runs the course (01-06), each chapter at world size 2.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh" cpu
log=$(mktemp)
"$root/scripts/build.sh" cpu 01_join_group 02_spawn 03_manual_allreduce 04_grad_hooks 05_ddp 06_slurm > "$log" 2>&1 || { cat "$log"; echo "build FAILED" >&2; exit 1; }
rm -f "$log"
"$root/scripts/course.sh" "$root/build-cpu"
