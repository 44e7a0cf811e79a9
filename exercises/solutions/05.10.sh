#!/usr/bin/env bash
# The solution of exercise 05.10, measured: the page's steps 1-4 on this machine, each measurement
# made three times and its median kept (one run of a 2-core machine can be a fifth off), then
# ddp_sim's prediction. Prints the answer line: t1 s a alpha T ratio yes|no.
# Usage: exercises/solutions/05.10.sh [build folder]   (default build-cpu)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
B=$(cd "${1:-$root/build-cpu}" && pwd)  # absolute: the runs below start in a scratch folder
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export DDP_GPU_COUNT=0
pin=(); command -v taskset > /dev/null && [ "$(nproc)" -ge 2 ] && pin=(taskset -c 0,1)
bench() { OMP_NUM_THREADS=1 "${pin[@]}" "$B/02_spawn" --nproc-per-node 2 -- "$B/allreduce_bench" "$@"; }
median() { sort -g | sed -n 2p; }
for i in 1 2 3; do
  bench --interference 2143272 --compute matmul --rounds 20 > "$work/i$i" 2>&1                  # step 1
  bench --min-bytes 4 --max-bytes 4 --compute-between-ms 2 --count mean > "$work/l$i" 2>&1       # step 2
  (cd "$work" && OMP_NUM_THREADS=1 "${pin[@]}" "$B/05_ddp" --model mlp --batch-size 256 --nproc-per-node 1 \
    --max-steps 100 --reset --out "$work/run$i" > "$work/t$i" 2>&1)                              # step 3
done
s=$(sed -n 's/.*interference s = \([-0-9.]*\).*/\1/p' "$work"/i? | median)
a=$(sed -n 's/.*slowdown a = \([-0-9.]*\).*/\1/p' "$work"/i? | median)
T=$(sed -n 's/.*all-reduce: \([0-9.]*\) us alone.*/\1/p' "$work"/i? | median)
alpha=$(sed -n 's/.* B: plain \([0-9.]*\) us.*/\1/p' "$work"/l? | median | awk '{ printf "%.1f", $1 / 2 }')
t1=$(sed -n 's/.*throughput: \([0-9.]*\) samples\/s.*/\1/p' "$work"/t? | median | awk '{ printf "%.3f", 256 / $1 * 1000 }')
read -r _ ratio < <("$root/exercises/checks/two_ranks_prediction.sh" "$B" "$t1" "$s" "$a" "$alpha" "$T")  # step 4
echo "$t1 $s $a $alpha $T $ratio $(awk -v r="$ratio" 'BEGIN { print (r > 1) ? "yes" : "no" }')"
