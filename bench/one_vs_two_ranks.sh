#!/usr/bin/env bash
# Why two ranks of the MLP train slower than one on a 2-core laptop, and two of the CNN faster:
# measured (05_ddp, one thread per rank), then predicted by bench/ddp_sim from the model's profile
# and what a rank does without DDP, measured in the same run (Note [Two ranks on two cores]).
# Usage: bench/one_vs_two_ranks.sh [--quick] [--runs N] [output folder, default runs/one_vs_two]
# --quick (the tests): fewer steps and a shorter all-reduce sweep, one run. --runs N (default 5):
# the all-reduce fitted once, then the models measured and predicted N times, interleaved (mlp,
# cnn, mlp, ...), each run with its own compute, shares, ranks apart and steps; the file keeps the
# last run's figures and every run's error.
# Writes its figures to results/one_vs_two_ranks.json (scripts/results.sh), which the pages cite;
# --quick writes it into the output folder instead (DDP_RESULTS_DIR overrides either).
# DDP_BUILD_DIR=<folder>: use those binaries as they are (no build).
#
# Note [Two ranks on two cores]
# A GPU all-reduces on its own engines while its SMs compute; Gloo on a CPU moves and sums the
# bytes on the CPU's cores. At two ranks of one thread each on two cores every core computes, so
# (a) the all-reduce and backward slow each other while they run together, by shares measured
# here, compute alone, all-reduce alone and both at once (allreduce_bench --interference, Note
# [Measuring interference]; ddp_sim --interference and --allreduce-slowdown); and (b) the
# all-reduce costs what it costs as a step meets it, right after its rank computed: the sweep puts 2 ms of
# computing (a matmul, allreduce_bench --compute-between-ms) before each all-reduce, and keeps the
# mean of its rounds, not the best. That raises the per-step latency severalfold (the two
# alphas, back to back and after computing: results/one_vs_two_ranks.json, as bench/README.md
# gives them) and fits the sizes better.
# The compute is a rank's step beside another rank's (two single-rank runs at once: no DDP, both
# cores busy), split into forward, backward and optimizer as one of those runs' trace measured
# them (ddp_sim --backward-ms, --optimizer-ms: on these cores the CNN's backward takes about its
# forward's time, not the twice its FLOPs say).
# (c) 05 all-reduces a 4-byte stop vote after every step (ddp_sim --stop-vote), which runs
# beside the next forward, slowed by the same shares.
# (d) The ranks apart: where backward ends, one rank is behind the other by an amount that varies
# step to step, and the step waits for the later one (Note [The slowest rank] in
# bench/ddp_sim.cpp). Measured in a traced two-rank run of its own (cost_model --trace: the mean
# |rank 0 - rank 1| of the last bucket's ready time) and given as ddp_sim --ranks-apart-ms.
# Each input is measured without DDP, or in a run of its own; the untraced two-rank run is only
# what the prediction is held against.
# Left out, and measured apart by bench/compute_after_allreduce.py: how long the compute takes
# after an all-reduce against after a barrier (results/compute_after_allreduce_{mlp,cnn}.json).
set -euo pipefail
# Gloo on the CPU's cores, on a GPU host too: no program here may default to NCCL and a GPU.
export DDP_GPU_COUNT=0
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/stop.sh"  # Ctrl-C: this script and every run it started stop (Note [Stop means stop])
quick= runs=5
while [ $# -gt 0 ]; do
  case $1 in
    --quick) quick=1 runs=1; shift ;;
    --runs) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || { echo "--runs: a count of runs, 1 or more (got '${2:-}')" >&2; exit 2; }
            runs=$2; shift 2 ;;
    -*) echo "usage: $0 [--quick] [--runs N] [output folder]" >&2; exit 2 ;;
    *) break ;;
  esac
done
out=${1:-runs/one_vs_two}
if [ -n "${DDP_BUILD_DIR:-}" ]; then
  bin=$DDP_BUILD_DIR
else
  "$root/scripts/build.sh" cpu 02_spawn 05_ddp allreduce_bench cost_model ddp_sim > /dev/null
  bin=$root/build-cpu
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)  # absolute: --init file:// needs it
source "$root/scripts/results.sh"
[ -n "$quick" ] && export DDP_RESULTS_DIR=${DDP_RESULTS_DIR:-$out}
members=""  # the JSON members of results/one_vs_two_ranks.json, one per model
rm -f "$out"/store-*  # a FileStore's file left by an earlier run would refuse the next one
cores=$(nproc)
rate() { sed -n 's/.*throughput: \([0-9.]*\) samples\/s.*/\1/p' "$1" | tail -n 1; }
trainer() {  # trainer <log> <05_ddp flags...>: one thread per rank (05 gives each of several ranks one)
  local log=$1; shift
  OMP_NUM_THREADS=1 "$bin/05_ddp" "$@" > "$log" 2>&1 || { cat "$log"; return 1; }
  [ -n "$(rate "$log")" ] || { echo "no throughput line in $log" >&2; cat "$log" >&2; return 1; }
}
flags() {  # flags <model>: 64 images per rank per step
  local steps=$([ "$1" = mlp ] && echo 300 || echo 60)
  [ -n "$quick" ] && steps=$([ "$1" = mlp ] && echo 40 || echo 8)
  echo --model "$1" --max-steps "$steps" --log-every 100000 --reset --timeout 120 --test-samples 200 ${quick:+--train-samples 4000}
}

# 1. The all-reduce of two ranks over loopback, fitted (alpha per ring step, beta per byte) into
# ddp_sim's link: back to back (as on a GPU's own engines), and after a compute (as on these
# cores). Each size the mean of 3 rounds of 16 MiB: a training meets each all-reduce as it comes,
# and on this virtual machine one round can take several times another (a waking vCPU).
sweep=(--max-bytes 8388608 --round-bytes 16777216 --rounds 3 --count mean)
[ -n "$quick" ] && sweep=(--max-bytes 2097152 --round-bytes 4194304 --rounds 2 --count mean)
fit() {  # fit <name> [allreduce_bench flags]: sweep, fit, and print "alpha_us gbps"
  local name=$1; shift
  rm -f "$out/allreduce-$name.csv"
  OMP_NUM_THREADS=1 "$bin/02_spawn" --nproc-per-node 2 --timeout 120 -- "$bin/allreduce_bench" --csv "$out/allreduce-$name.csv" \
    "${sweep[@]}" "$@" > "$out/allreduce-$name.log" 2>&1 || { cat "$out/allreduce-$name.log" >&2; return 1; }
  "$bin/cost_model" --csv "$out/allreduce-$name.csv" > "$out/fit-$name.txt" 2>&1 || { cat "$out/fit-$name.txt" >&2; return 1; }
  local fitted
  fitted=$(sed -n 's/^fitted ring model: alpha = \([0-9.]*\) us per step, beta = \([0-9.]*\) ns\/byte.*/\1 \2/p' "$out/fit-$name.txt")
  [ -n "$fitted" ] || { echo "the $name sweep fits no positive alpha and beta (too noisy): $out/fit-$name.txt" >&2; return 1; }
  awk '{ printf "%s %.4f\n", $1, 8 / $2 }' <<< "$fitted"  # 1/beta bytes per ns = GB/s; x8 = Gb/s
}
# A sweep beside other work (a build, the tests) can come out too noisy to fit: swept again, at
# most three times in all, each try said.
fit_again() {  # fit_again <name> [allreduce_bench flags]
  local try
  for try in 1 2 3; do
    fit "$@" && return 0
    [ $try = 3 ] || echo "sweeping the $1 all-reduce again (try $((try + 1)) of 3)" >&2
  done
  return 1
}
fitted=$(fit_again alone) || exit 1
read -r alone_alpha alone_gbps <<< "$fitted"
fitted=$(fit_again after-compute --compute-between-ms 2) || exit 1
read -r after_alpha after_gbps <<< "$fitted"
echo "== $cores cores; two ranks' all-reduce over loopback, fitted: back to back alpha $alone_alpha us, 1/beta $alone_gbps Gb/s;" \
  "after 2 ms of computing alpha $after_alpha us, 1/beta $after_gbps Gb/s =="

# Compute and all-reduce beside each other (Note [Measuring interference]): the model's
# gradients' bytes, two ranks of one thread each, as the two-rank run, and a compute of the
# model's kind (the MLP's matmul, the CNN's convolution). Printed as measured; a
# share that noise made negative goes to ddp_sim as 0.
interference() {  # interference <model>: prints "s a"
  local bytes log=$out/interference-$1.log
  bytes=$("$bin/ddp_sim" --profiles-dir "$root/bench/profiles" --model "$1" --compute-ms 1 --nodes 1 --gpus-per-node 1 |
    sed -n 's/^model [^:]*: [0-9]* parameter tensors, \([0-9.]*\) MB of gradients.*/\1/p' | awk '{ printf "%d", $1 * 1e6 }')
  OMP_NUM_THREADS=1 "$bin/02_spawn" --nproc-per-node 2 --timeout 120 -- "$bin/allreduce_bench" --interference "$bytes" \
    --compute "$([ "$1" = mlp ] && echo matmul || echo conv)" \
    --rounds "$([ -n "$quick" ] && echo 3 || echo 20)" > "$log" 2>&1 || { cat "$log" >&2; return 1; }
  sed -n 's/.*interference s = \([-0-9.]*\)$/\1/p; s/.*slowdown a = \([-0-9.]*\)$/\1/p' "$log" | tr '\n' ' '
}

# 2. Each model: one rank alone; two single-rank runs at once (the busy compute); two ranks.
step() { sed -n 's/^step: \([0-9.]*\) ms/\1/p' "$1"; }
error() { sed -n 's/^measured: .*: \([-+0-9.]*%\)$/\1/p' "$1"; }
per_run=""  # every run's errors, for the file
for run in $(seq 1 "$runs"); do
members=""
rm -f "$out"/store-*
[ "$runs" -gt 1 ] && echo "== run $run of $runs"
for model in mlp cnn; do
  read -r share slowdown <<< "$(interference "$model")" && [ -n "${slowdown:-}" ] || { echo "no interference measured for $model" >&2; exit 1; }
  read -ra train <<< "$(flags "$model")"
  trainer "$out/$model-1.log" --nproc-per-node 1 "${train[@]}" --out "$out/$model-1"
  trainer "$out/$model-busy-a.log" --nproc-per-node 1 "${train[@]}" --out "$out/$model-busy-a" --init "file://$out/store-a" \
    --trace "$out/$model-busy-a.json" &
  trainer "$out/$model-busy-b.log" --nproc-per-node 1 "${train[@]}" --out "$out/$model-busy-b" --init "file://$out/store-b" || { wait; exit 1; }
  wait $! || exit 1
  # The ranks apart, from a traced two-rank run: not the one judged.
  trainer "$out/$model-2-traced.log" --nproc-per-node 2 "${train[@]}" --out "$out/$model-2-traced" --trace "$out/$model-2-traced.json"
  "$bin/cost_model" --csv "$out/allreduce-after-compute.csv" --trace "$out/$model-2-traced.json" > "$out/$model-apart.txt" 2>&1 ||
    { cat "$out/$model-apart.txt" >&2; exit 1; }
  apart=$(sed -n 's/^ranks apart .*: mean \([0-9.]*\) ms, median .*/\1/p' "$out/$model-apart.txt")
  [ -n "$apart" ] || { echo "no ranks apart in $out/$model-apart.txt" >&2; exit 1; }
  trainer "$out/$model-2.log" --nproc-per-node 2 "${train[@]}" --out "$out/$model-2"
  one=$(rate "$out/$model-1.log") two=$(rate "$out/$model-2.log")
  busy=$(awk -v a="$(rate "$out/$model-busy-a.log")" -v b="$(rate "$out/$model-busy-b.log")" 'BEGIN { printf "%.1f", (a + b) / 2 }')
  alone_ms=$(awk -v r="$one" 'BEGIN { printf "%.3f", 64 / r * 1000 }')
  compute_ms=$(awk -v r="$busy" 'BEGIN { printf "%.3f", 64 / r * 1000 }')
  measured_ms=$(awk -v r="$two" 'BEGIN { printf "%.3f", 128 / r * 1000 }')
  # The busy step's parts, in the traced run's proportions (cost_model reads the trace's medians).
  "$bin/cost_model" --csv "$out/allreduce-after-compute.csv" --trace "$out/$model-busy-a.json" > "$out/$model-busy-parts.txt" 2>&1 ||
    { cat "$out/$model-busy-parts.txt" >&2; exit 1; }
  read -r fwd bwd opt < <(sed -n 's/.*forward+data \([0-9.]*\) ms, backward computing \([0-9.]*\) ms, optimizer \([0-9.]*\) ms.*/\1 \2 \3/p' \
    "$out/$model-busy-parts.txt")
  [ -n "${opt:-}" ] || { echo "no traced step in $out/$model-busy-parts.txt" >&2; exit 1; }
  read -r backward_ms optimizer_ms < <(awk -v c="$compute_ms" -v f="$fwd" -v b="$bwd" -v o="$opt" \
    'BEGIN { printf "%.3f %.3f\n", c * b / (f + b + o), c * o / (f + b + o) }')
  sim=("$bin/ddp_sim" --profiles-dir "$root/bench/profiles" --model "$model" --nodes 1 --gpus-per-node 2 --measured-ms "$measured_ms" --stop-vote)
  on_cores=(--compute-ms "$compute_ms" --backward-ms "$backward_ms" --optimizer-ms "$optimizer_ms"
    --intra-gbps "$after_gbps" --intra-latency-us "$after_alpha"
    --interference "$(awk -v x="$share" 'BEGIN { print (x < 0 ? 0 : x) }')"
    --allreduce-slowdown "$(awk -v x="$slowdown" 'BEGIN { print (x < 0 ? 0 : x) }')")
  "${sim[@]}" "${on_cores[@]}" --ranks-apart-ms "$apart" > "$out/$model-sim-cpu.txt"
  "${sim[@]}" "${on_cores[@]}" > "$out/$model-sim-cpu-alike.txt"  # the same without the ranks apart: what the term adds
  "${sim[@]}" --compute-ms "$alone_ms" --intra-gbps "$alone_gbps" --intra-latency-us "$alone_alpha" > "$out/$model-sim-gpu.txt"
  echo "$model: 1 rank $one samples/s ($alone_ms ms a step; $compute_ms ms beside another rank's); 2 ranks $two samples/s" \
    "($measured_ms ms a step of 2 x 64): $(awk -v a="$two" -v b="$one" 'BEGIN { printf "%.2f", a / b }')x one rank"
  awk -v c="$(step "$out/$model-sim-cpu.txt")" -v g="$(step "$out/$model-sim-gpu.txt")" -v one="$one" \
      -v e="$(error "$out/$model-sim-cpu.txt")" -v f="$(error "$out/$model-sim-gpu.txt")" -v s="$share" -v a="$slowdown" -v d="$apart" 'BEGIN {
    printf "  ddp_sim, as on these cores (busy compute, all-reduce after a compute, ranks apart %s ms, interference s = %s, a = %s): %.3f ms = %.0f samples/s, %.2fx one rank (error %s)\n", d, s, a, c, 128000 / c, 128000 / c / one, e
    printf "  ddp_sim, as on a GPU (compute alone, all-reduce back to back, hidden behind backward): %.3f ms = %.0f samples/s, %.2fx one rank (error %s)\n", g, 128000 / g, 128000 / g / one, f }'
  echo "  the same without the ranks apart: $(step "$out/$model-sim-cpu-alike.txt") ms (error $(error "$out/$model-sim-cpu-alike.txt"))"
  sed -n 's/^all-reduce: /  all-reduce after a compute: /p' "$out/$model-sim-cpu.txt"
  members+=$(awk -v m="$model" -v one="$one" -v two="$two" -v busy="$busy" -v alone="$alone_ms" -v comp="$compute_ms" \
      -v meas="$measured_ms" -v c="$(step "$out/$model-sim-cpu.txt")" -v g="$(step "$out/$model-sim-gpu.txt")" \
      -v e="$(error "$out/$model-sim-cpu.txt" | tr -d '%+')" -v f="$(error "$out/$model-sim-gpu.txt" | tr -d '%+')" \
      -v s="$share" -v a="$slowdown" -v d="$apart" 'BEGIN {
    printf "\"%s\": {\"one_rank_samples_per_s\": %s, \"two_ranks_samples_per_s\": %s, \"busy_samples_per_s\": %s, ", m, one, two, busy
    printf "\"one_rank_step_ms\": %s, \"busy_step_ms\": %s, \"two_ranks_step_ms\": %s, \"two_over_one\": %.4f, ", alone, comp, meas, two / one
    printf "\"interference_s\": %s, \"allreduce_slowdown_a\": %s, \"ranks_apart_ms\": %s, ", s, a, d
    printf "\"predicted_cores_step_ms\": %s, \"predicted_cores_two_over_one\": %.4f, \"predicted_cores_error_pct\": %s, ", c, 128000 / c / one, e
    printf "\"predicted_gpu_step_ms\": %s, \"predicted_gpu_two_over_one\": %.4f, \"predicted_gpu_error_pct\": %s},\n  ", g, 128000 / g / one, f }')
  per_run+="{\"run\": $run, \"model\": \"$model\", \"ranks_apart_ms\": $apart, \"predicted_cores_error_pct\": $(error "$out/$model-sim-cpu.txt" | tr -d '%+'), "
  per_run+="\"without_apart_error_pct\": $(error "$out/$model-sim-cpu-alike.txt" | tr -d '%+')}, "
done
done
# Within 10 % of the measured step, counted over the runs: the bar the prediction is held to here.
within() {  # within <model> <key>: in how many runs |that error| <= 10 %
  grep -o "\"model\": \"$1\", [^}]*" <<< "$per_run" | sed "s/.*\"$2\": \([-0-9.]*\).*/\1/" | awk '$1 <= 10 && $1 >= -10' | wc -l
}
if [ "$runs" -gt 1 ]; then
  echo "over $runs interleaved runs, the prediction as on these cores within 10 % of the measured step:" \
    "mlp in $(within mlp predicted_cores_error_pct) of $runs, cnn in $(within cnn predicted_cores_error_pct) of $runs;" \
    "without the ranks apart mlp in $(within mlp without_apart_error_pct), cnn in $(within cnn without_apart_error_pct)"
fi
members+="\"runs\": [${per_run%, }], \"within_10_pct\": {\"runs\": $runs, \"mlp\": $(within mlp predicted_cores_error_pct), \"cnn\": $(within cnn predicted_cores_error_pct), "
members+="\"mlp_without_apart\": $(within mlp without_apart_error_pct), \"cnn_without_apart\": $(within cnn without_apart_error_pct)},
  "
write_result one_vs_two_ranks "bench/one_vs_two_ranks.sh${quick:+ --quick}" "$members\"cores\": $cores, \"allreduce\": {\"alone_alpha_us\": $alone_alpha, \"alone_gbps\": $alone_gbps, \"after_compute_alpha_us\": $after_alpha, \"after_compute_gbps\": $after_gbps}"
[ "$cores" -le 2 ] && echo "on $cores cores every core computes at 2 ranks: the first prediction is the one for this machine" ||
  echo "on $cores cores a core is left over at 2 ranks: the all-reduce has one of its own, and the second prediction is closer to this machine"
