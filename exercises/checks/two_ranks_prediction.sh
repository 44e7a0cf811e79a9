#!/usr/bin/env bash
# Exercise 05.10's step 4, the one way its check, its solution and the tests make it: ddp_sim's
# step for two ranks of the MLP from the five measured figures, and two ranks over one.
#   exercises/checks/two_ranks_prediction.sh BUILD t1 s a alpha T   prints "t2 ratio"
# G is the bandwidth that leaves the all-reduce its time after its two latencies (a ring of two
# moves each byte once); s below 0 (noise) is given as 0. Exit 1, with ddp_sim's own lines on
# stderr, when it refuses the figures; the caller checks T > 2 alpha first.
set -uo pipefail
[ $# = 6 ] || { sed -n '4p' "$0" | sed 's/^# *//' >&2; exit 2; }
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$1 t1=$2 s=$3 a=$4 alpha=$5 T=$6
G=$(awk -v T="$T" -v al="$alpha" 'BEGIN { printf "%.6g", 8 * 2143272 / (T - 2 * al) / 1000 }')
out=$("$build/ddp_sim" --profiles-dir "$root/bench/profiles" --model mlp --nodes 1 --gpus-per-node 2 --stop-vote \
  --compute-ms "$t1" --interference "$(awk -v s="$s" 'BEGIN { print (s < 0) ? 0 : s }')" --allreduce-slowdown "$a" \
  --intra-latency-us "$alpha" --intra-gbps "$G" 2>&1) || { tail -n 2 <<< "$out" >&2; exit 1; }
t2=$(sed -n 's/^step: \([0-9.]*\) ms$/\1/p' <<< "$out")
[ -n "$t2" ] || { echo "ddp_sim printed no step: $(tail -n 3 <<< "$out")" >&2; exit 1; }
echo "$t2 $(awk -v a="$t1" -v b="$t2" 'BEGIN { printf "%.2f", 2 * a / b }')"
