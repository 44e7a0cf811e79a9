#!/usr/bin/env bash
# Local SGD and DiLoCo against the gradients averaged every step (chapter 08, two replicas), each
# replica a host of its own on links of a given rate (08's --link, 02_spawn's hosts: root): the
# step time, from the commit times in replica r0's step log (the first commit to the last, over
# the steps between), and the bytes each replica all-reduced. --sync-every 4 for both. The toy
# model is 161 parameters: what the links cost here is each collective's latency and its few
# bytes, not bandwidth; a bigger model's bytes would count (bench/cost_model.sh --link measures both).
# Usage: bench/local_sgd_links.sh [--repeats N] [--steps S] [rate ...]   (default rates: 1mbit 100mbit)
# Writes results/local_sgd_links.json (scripts/results.sh: DDP_RECORD_RESULTS=1 for the course's own).
set -euo pipefail
export DDP_GPU_COUNT=0
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/stop.sh"  # Ctrl-C: this script and every run it started stop (Note [Stop means stop])
source "$root/scripts/kernels.sh"
repeats=3 steps=200
while [ $# -gt 0 ]; do
  case $1 in
    --repeats) repeats=${2:-}; shift 2 ;;
    --steps) steps=${2:-}; shift 2 ;;
    -*) echo "bench/local_sgd_links.sh: unknown flag $1 (--repeats N, --steps S, then rates)" >&2; exit 2 ;;
    *) break ;;
  esac
done
[[ $repeats =~ ^[1-9][0-9]*$ ]] || { echo "--repeats: a whole number from 1, not '$repeats'" >&2; exit 2; }
[[ $steps =~ ^[1-9][0-9]+$ ]] || { echo "--steps: a whole number from 10, not '$steps'" >&2; exit 2; }
rates=("$@")
[ ${#rates[@]} -gt 0 ] || rates=(1mbit 100mbit)
[ "$(id -u)" = 0 ] || { echo "bench/local_sgd_links.sh: needs root (--link makes network namespaces)" >&2; exit 2; }
if [ -n "${DDP_BUILD_DIR:-}" ]; then
  bin=$DDP_BUILD_DIR
else
  "$root/scripts/build.sh" cpu 08_fault_tolerance > /dev/null
  bin=$root/build-cpu
fi
out=$(mktemp -d "${TMPDIR:-/tmp}/local_sgd_links.XXXXXX")
trap 'rm -rf "$out"' EXIT
source "$root/scripts/results.sh"
declare -A modes=([gradients]="" [local_sgd]="--sync-every 4" [diloco]="--sync-every 4 --outer-lr 0.7")
lines=""
for rate in "${rates[@]}"; do
  for mode in gradients local_sgd diloco; do
    for k in $(seq 1 "$repeats"); do
      run=$out/$rate-$mode-$k
      # shellcheck disable=SC2086  # the mode's flags, split on purpose
      "$bin/08_fault_tolerance" --replicas 2 --link "$rate" --steps "$steps" ${modes[$mode]} --out "$run" > "$run.log" 2>&1 ||
        { echo "the run failed: $rate $mode (its log: $run.log)" >&2; cat "$run.log" >&2; exit 1; }
      ms=$(awk '$1 == "committed" { t[n++] = $4 } END { printf "%.3f", 1000 * (t[n-1] - t[0]) / (n - 1) }' "$run/steps.r0.txt")
      bytes=$(sed -n 's/.*\[replica r0\] done: .*all-reduced \([0-9]*\) bytes.*/\1/p' "$run.log")
      echo "$rate $mode run $k: $ms ms a step, $bytes bytes all-reduced"
      lines+="$rate $mode $ms $bytes"$'\n'
    done
  done
done
members=$(printf '%s' "$lines" | python3 -c '
import json, statistics, sys
runs = {}
for line in sys.stdin.read().split("\n"):
    if line:
        rate, mode, ms, nbytes = line.split()
        runs.setdefault(rate, {}).setdefault(mode, {"step_ms": [], "bytes": int(nbytes)})["step_ms"].append(float(ms))
out = {"repeats": int(sys.argv[1]), "steps": int(sys.argv[2]), "sync_every": 4, "rates": {}}
for rate, modes in runs.items():
    r = out["rates"][rate] = {}
    for mode, m in modes.items():
        r[mode] = {"step_ms": m["step_ms"], "median_step_ms": round(statistics.median(m["step_ms"]), 2), "bytes": m["bytes"]}
    for mode in ("local_sgd", "diloco"):  # how many times faster a step than with the gradients every step
        r[mode]["speedup"] = round(r["gradients"]["median_step_ms"] / r[mode]["median_step_ms"], 1)
print(json.dumps(out)[1:-1])' "$repeats" "$steps")
write_result local_sgd_links "bench/local_sgd_links.sh --repeats $repeats --steps $steps ${rates[*]}" "$members"
