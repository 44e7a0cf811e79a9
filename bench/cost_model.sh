#!/usr/bin/env bash
# The cost model of this machine in one command: all-reduce from 4 KiB to 64 MiB at world sizes
# 2, 3 and 4 (time, algbw, busbw; ours against plain c10d Gloo), the alpha-beta ring model fitted
# to it with its error at every point, a DDP step of the CNN predicted from a traced 05_ddp run,
# the --bucket-cap-mb sweep measured and predicted, and a what-if cluster.
# Usage: bench/cost_model.sh [--quick] [output folder, default runs/cost_model] [cost_model what-if flags...]
#   e.g. bench/cost_model.sh runs/cost_model --nodes 4 --gpus-per-node 8 --inter-gbps 25
# --quick (the tests): world sizes 2-3, up to 1 MiB, short training runs.
# DDP_BUILD_DIR=<folder>: use those binaries as they are (no build).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
quick=
if [ "${1:-}" = --quick ]; then quick=1; shift; fi
out=${1:-runs/cost_model}
shift || true
if [ -n "${DDP_BUILD_DIR:-}" ]; then
  bin=$DDP_BUILD_DIR
else
  "$root/scripts/build.sh" cpu 02_spawn 05_ddp allreduce_bench cost_model > /dev/null
  bin=$root/build-cpu
fi
mkdir -p "$out"
rm -f "$out/allreduce.csv"

if [ -n "$quick" ]; then worlds="2 3"; sweep=(--max-bytes 1048576 --rounds 2); steps=12; caps="1,25"
else worlds="2 3 4"; sweep=(); steps=120; caps="0.25,1,4,25"; fi
# The trainer's runs: the CNN at world size 2 on Fashion-MNIST, as in the README's table.
train=(--nproc-per-node 2 --model cnn --max-steps "$steps" --log-every 1000 --reset --timeout 60)
[ -n "$quick" ] && train+=(--train-samples 2000 --test-samples 200)

echo "== all-reduce on $(nproc) cores, Gloo over 127.0.0.1 (each line: the best of several rounds) =="
for n in $worlds; do
  "$bin/02_spawn" --nproc-per-node "$n" --timeout 120 -- "$bin/allreduce_bench" --csv "$out/allreduce.csv" "${sweep[@]}" \
    > "$out/allreduce-$n.log" 2>&1 || { cat "$out/allreduce-$n.log"; exit 1; }
done

echo "== a traced step of 05_ddp (CNN, world 2, default --bucket-cap-mb 25) =="
"$bin/05_ddp" "${train[@]}" --out "$out/trace-run" --trace "$out/trace.json" > "$out/trace-run.log" 2>&1 ||
  { cat "$out/trace-run.log"; exit 1; }
grep -E "overlap:|trace:" "$out/trace-run.log"

echo "== --bucket-cap-mb sweep, measured =="
steps_ms=() hidden=()
for cap in ${caps//,/ }; do
  log=$out/cap-$cap.log
  "$bin/05_ddp" "${train[@]}" --bucket-cap-mb "$cap" --out "$out/cap-$cap" > "$log" 2>&1 || { cat "$log"; exit 1; }
  rate=$(sed -n 's/.*throughput: \([0-9.]*\) samples\/s.*/\1/p' "$log" | tail -n 1)
  share=$(sed -n 's/.*overlap: \([0-9.]*\)% of all-reduce.*/\1/p' "$log" | tail -n 1)
  [ -n "$rate" ] && [ -n "$share" ] || { echo "no throughput/overlap line in $log" >&2; cat "$log"; exit 1; }
  step=$(awk -v r="$rate" 'BEGIN { printf "%.3f", 2 * 64 / r * 1000 }')  # 2 ranks x 64 images per step
  echo "cap $cap MiB: $rate samples/s = $step ms per step, $share% of all-reduce hidden behind backward"
  steps_ms+=("$step") hidden+=("$share")
done

echo "== the model =="
join() { local IFS=,; echo "$*"; }
"$bin/cost_model" --csv "$out/allreduce.csv" --trace "$out/trace.json" --bucket-sweep "$caps" \
  --measured-ms "$(join "${steps_ms[@]}")" --measured-hidden "$(join "${hidden[@]}")" "$@"
