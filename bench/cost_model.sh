#!/usr/bin/env bash
# The cost model of this machine in one command: all-reduce from 4 KiB to 64 MiB at world sizes
# 2, 3 and 4 (time, algbw, busbw; ours against plain c10d Gloo), the alpha-beta ring model fitted
# to it with its error at every point, a DDP step of the CNN predicted from a traced 05_ddp run,
# the --bucket-cap-mb sweep measured and predicted, and a what-if cluster.
# Usage: bench/cost_model.sh [--quick] [--link RATE] [output folder, default runs/cost_model] [cost_model what-if flags...]
#   e.g. bench/cost_model.sh runs/cost_model --nodes 4 --gpus-per-node 8 --inter-gbps 25
# --quick (the tests): world sizes 2-3, up to 1 MiB, short training runs.
# --link RATE (root): the same on nodes that are hosts on links of RATE (02_spawn --link, Note
#   [Nodes as hosts]), one rank per node: the sweep at world 2 and 4, the fitted beta against RATE,
#   and the CNN's step with buckets, with one bucket (--one-bucket) and with --comm-hook fp16,
#   measured and predicted, by cost_model (from the trace) and by ddp_sim (from the CNN's profile).
#   e.g. bench/cost_model.sh --link 100mbit runs/link-100mbit
# DDP_BUILD_DIR=<folder>: use those binaries as they are (no build).
# Writes its figures to a result file (scripts/results.sh) that the pages cite:
# results/cost_model.json on loopback; with --link, results/cost_model_link_100mbit.json,
# results/cost_model_link_1gbit.json (cost_model_link_RATE.json); --quick writes into the output
# folder instead (DDP_RESULTS_DIR overrides either).
set -euo pipefail
# Gloo on the CPU's cores, on a GPU host too: no program here may default to NCCL and a GPU.
export DDP_GPU_COUNT=0
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/stop.sh"  # Ctrl-C: this script and every run it started stop (Note [Stop means stop])
quick= link=
if [ "${1:-}" = --quick ]; then quick=1; shift; fi
if [ "${1:-}" = --link ]; then link=${2:?--link needs a rate such as 100mbit}; shift 2; fi
out=${1:-runs/cost_model}
shift || true
if [ -n "${DDP_BUILD_DIR:-}" ]; then
  bin=$DDP_BUILD_DIR
else
  "$root/scripts/build.sh" cpu 02_spawn 05_ddp allreduce_bench cost_model ddp_sim > /dev/null
  bin=$root/build-cpu
fi
mkdir -p "$out"
rm -f "$out/allreduce.csv" "$out/allreduce-fp16.csv"
source "$root/scripts/results.sh"
[ -n "$quick" ] && export DDP_RESULTS_DIR=${DDP_RESULTS_DIR:-$out}
command="bench/cost_model.sh${quick:+ --quick}${link:+ --link $link}"
# The fit's line of cost_model's output as JSON members.
fit_members() {  # fit_members <cost_model output>
  sed -n 's/^fitted ring model: alpha = \([0-9.]*\) us per step, beta = \([0-9.]*\) ns\/byte (busbw limit 1\/beta = \([0-9.]*\) GB\/s); median |error| \([0-9.]*\)%, worst \([0-9.]*\)%$/"alpha_us": \1, "beta_ns_per_byte": \2, "busbw_limit_GBps": \3, "median_error_pct": \4, "worst_error_pct": \5/p' "$1"
}

# The step time of a 05_ddp log: its throughput line, 2 ranks x 64 images per step.
step_ms() {
  local rate
  rate=$(sed -n 's/.*throughput: \([0-9.]*\) samples\/s.*/\1/p' "$1" | tail -n 1)
  [ -n "$rate" ] || { echo "no throughput line in $1" >&2; cat "$1" >&2; return 1; }
  awk -v r="$rate" 'BEGIN { printf "%.1f", 2 * 64 / r * 1000 }'
}

if [ -n "$link" ]; then
  # Sizes and rounds scaled to the rate: ~0.4 s of traffic per round, sizes up to twice that.
  bits=$(echo "$link" | awk '{ n = $0 + 0; u = tolower($0); print n * (u ~ /g/ ? 1e9 : u ~ /m/ ? 1e6 : 1e3) }')
  round=$(awk -v b="$bits" 'BEGIN { printf "%d", b / 8 * 0.4 }')
  max=4096; while [ "$max" -lt $((round * 2)) ]; do max=$((max * 2)); done
  [ -n "$quick" ] && max=1048576 round=1048576  # the tests: up to 1 MiB, short runs
  echo "== all-reduce between hosts on $link links (one rank per node; each line: the best of 2 rounds) =="
  for n in 2 4; do
    "$bin/02_spawn" --nnodes "$n" --nproc-per-node 1 --link "$link" --timeout 300 -- "$bin/allreduce_bench" --csv "$out/allreduce.csv" \
      --max-bytes "$max" --round-bytes "$round" --rounds 2 > "$out/allreduce-$n.log" 2>&1 || { cat "$out/allreduce-$n.log"; exit 1; }
  done
  # What --comm-hook fp16 all-reduces: float16, half the bytes, summed slower per byte on the
  # CPU, and slower for a gradient's values than for zeros (Note [What is summed] in
  # allreduce_bench.cpp).
  "$bin/02_spawn" --nnodes 2 --nproc-per-node 1 --link "$link" --timeout 300 -- "$bin/allreduce_bench" --csv "$out/allreduce-fp16.csv" \
    --dtype float16 --values gradients --max-bytes "$max" --round-bytes "$round" --rounds 2 > "$out/allreduce-fp16.log" 2>&1 ||
    { cat "$out/allreduce-fp16.log"; exit 1; }
  # The CNN at world 2, one rank on each of two hosts: traced, then measured as it is, with one
  # bucket, and with the fp16 hook.
  steps=60
  nodes=("$bin/02_spawn" --nnodes 2 --nproc-per-node 1 --link "$link" --timeout 120 --)
  train=(--model cnn --max-steps "$steps" --log-every 1000 --reset --timeout 60 --test-samples 200)
  [ -n "$quick" ] && train+=(--max-steps 8 --train-samples 2000)
  echo "== the CNN on 2 hosts: traced, then measured ($steps steps each) =="
  "${nodes[@]}" "$bin/05_ddp" "${train[@]}" --out "$out/trace-run" --trace "$out/trace.json" > "$out/trace-run.log" 2>&1 ||
    { cat "$out/trace-run.log"; exit 1; }
  # Compute and all-reduce beside each other between the hosts (Note [Measuring interference]
  # in allreduce_bench.cpp): the CNN's gradients and its convolution, as float32 and as the fp16
  # hook sends them. "s a" for ddp_sim; a share that noise made negative goes to it as 0.
  interference() {  # interference <name> [allreduce_bench flags]
    local log=$out/interference-$1.log
    shift
    "${nodes[@]}" "$bin/allreduce_bench" --compute conv --rounds "$([ -n "$quick" ] && echo 2 || echo 20)" "$@" > "$log" 2>&1 ||
      { cat "$log" >&2; return 1; }
  }
  grads=3297832  # the CNN's gradients, bytes (bench/profiles/cnn.json)
  interference 32 --interference "$grads" || exit 1
  interference 16 --interference $((grads / 2)) --dtype float16 --values gradients || exit 1
  shares() {  # shares <log>: "s a", each at least 0
    sed -n 's/.*interference s = \([-0-9.]*\)$/\1/p; s/.*slowdown a = \([-0-9.]*\)$/\1/p' "$1" |
      awk '{ v[NR] = $1 < 0 ? 0 : $1 } END { if (NR == 2) print v[1], v[2] }'
  }
  read -r s32 a32 <<< "$(shares "$out/interference-32.log")"
  read -r s16 a16 <<< "$(shares "$out/interference-16.log")"
  [ -n "${a32:-}" ] && [ -n "${a16:-}" ] || { echo "no interference in $out/interference-*.log" >&2; exit 1; }
  echo "== compute beside an all-reduce between the hosts (allreduce_bench --interference, the CNN's convolution) =="
  grep -h "rank 0/2\]   " "$out/interference-32.log" "$out/interference-16.log" | sed 's/^\[rank 0\/2\] //'
  compare=()
  for variant in buckets one-bucket fp16; do
    case $variant in buckets) extra=() ;; one-bucket) extra=(--one-bucket) ;; fp16) extra=(--comm-hook fp16) ;; esac
    "${nodes[@]}" "$bin/05_ddp" "${train[@]}" "${extra[@]}" --out "$out/$variant" > "$out/$variant.log" 2>&1 ||
      { cat "$out/$variant.log"; exit 1; }
    ms=$(step_ms "$out/$variant.log")
    echo "$variant: $ms ms per step ($(grep -o 'overlap: [0-9.]*%' "$out/$variant.log" | tail -n 1) of all-reduce hidden behind backward)"
    compare+=("$variant=$ms")
  done
  echo "== the model =="
  "$bin/cost_model" --csv "$out/allreduce.csv" --csv-fp16 "$out/allreduce-fp16.csv" --link "$link" --trace "$out/trace.json" \
    --compare "$(IFS=,; echo "${compare[*]}")" "$@" | tee "$out/model.txt"
  # The same steps from bench/ddp_sim: the CNN's profile (not the trace's gradients), the link's
  # configured rate, the alpha fitted above, and the compute the trace measured, its backward
  # part as measured too (on these cores about the forward's, not the twice its FLOPs say). The
  # fp16 hook's all-reduce at the float16 sweep's fit instead: Gloo sums float16 on the CPU, more
  # slowly per byte than float32, and at 1 Gbit/s more slowly than the wire carries it.
  alpha_us=$(sed -n 's/^fitted ring model: alpha = \([0-9.]*\) us.*/\1/p' "$out/model.txt")
  read -r alpha16_us gbps16 < <(sed -n 's/^fitted to the float16 all-reduces .*: alpha = \([0-9.]*\) us per step, beta = \([0-9.]*\) ns\/byte.*/\1 \2/p' \
    "$out/model.txt" | awk '{ printf "%s %.4f\n", $1, 8 / $2 }')
  read -r fwd bwd opt < <(sed -n 's/.*forward+data \([0-9.]*\) ms, backward computing \([0-9.]*\) ms, optimizer \([0-9.]*\) ms.*/\1 \2 \3/p' "$out/model.txt")
  [ -n "$alpha_us" ] && [ -n "$opt" ] && [ -n "${gbps16:-}" ] || { echo "no fit or traced step in $out/model.txt" >&2; exit 1; }
  gbps=$(awk -v b="$bits" 'BEGIN { print b / 1e9 }')
  compute_ms=$(awk -v f="$fwd" -v b="$bwd" -v o="$opt" 'BEGIN { print f + b + o }')
  echo "== the simulator (bench/ddp_sim: 2 nodes x 1 rank, $link links = $gbps Gb/s, alpha $alpha_us us, interference s $s32, a $a32;" \
    "fp16 at the float16 fit: $gbps16 Gb/s, alpha $alpha16_us us, s $s16, a $a16) =="
  for pair in "${compare[@]}"; do
    variant=${pair%%=*} ms=${pair#*=}
    net=(--inter-gbps "$gbps" --inter-latency-us "$alpha_us" --interference "$s32" --allreduce-slowdown "$a32")
    case $variant in
      buckets) extra=() ;; one-bucket) extra=(--one-bucket) ;;
      fp16) extra=(--comm-hook fp16) net=(--inter-gbps "$gbps16" --inter-latency-us "$alpha16_us" --interference "$s16" --allreduce-slowdown "$a16") ;;
    esac
    "$bin/ddp_sim" --profiles-dir "$root/bench/profiles" --model cnn --nodes 2 --gpus-per-node 1 "${net[@]}" \
      --compute-ms "$compute_ms" --optimizer-ms "$opt" --backward-ms "$bwd" \
      --measured-ms "$ms" "${extra[@]}" > "$out/sim-$variant.txt"
    echo "$variant: $(grep '^measured: ' "$out/sim-$variant.txt"); $(grep '^overlap share' "$out/sim-$variant.txt")"
  done
  variants=""
  for pair in "${compare[@]}"; do
    variant=${pair%%=*} ms=${pair#*=}
    hidden=$(sed -n 's/.*overlap: \([0-9.]*\)% of all-reduce.*/\1/p' "$out/$variant.log" | tail -n 1)
    read -r cm_ms cm_err < <(awk -v v="$variant" '$1 == v && NF == 11 { print $7 + 0, $11 + 0 }' "$out/model.txt")
    read -r sim_ms sim_err < <(sed -n 's/^measured: [0-9.]* ms; predicted \([0-9.]*\) ms: \([-+0-9.]*\)%$/\1 \2/p' "$out/sim-$variant.txt" | tr -d '+')
    variants+="\"$variant\": {\"measured_step_ms\": $ms, \"measured_hidden_pct\": ${hidden:-null}, \"cost_model_step_ms\": $cm_ms, \"cost_model_error_pct\": $cm_err, \"ddp_sim_step_ms\": $sim_ms, \"ddp_sim_error_pct\": $sim_err},"$'\n  '
  done
  link_line=$(sed -n 's/^the link: configured .* = \([0-9.]*\) MB\/s each way; the fit.s 1\/beta = \([0-9.]*\) MB\/s: \([-+0-9.]*\)%$/"configured_MBps": \1, "fitted_MBps": \2, "fitted_error_pct": \3/p' "$out/model.txt" | tr -d '+')
  write_result "cost_model_link_$link" "$command" "$variants\"link\": \"$link\", $link_line, $(fit_members "$out/model.txt"), \"steps\": $steps,
  \"shares\": {\"float32_s\": $s32, \"float32_a\": $a32, \"float16_s\": $s16, \"float16_a\": $a16}"
  exit 0
fi

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
  --measured-ms "$(join "${steps_ms[@]}")" --measured-hidden "$(join "${hidden[@]}")" "$@" | tee "$out/model.txt"

# The sweep: each cap's measured step and share beside cost_model's prediction (its table's rows).
sweep_json=$(awk '$1 ~ /^[0-9.]+$/ && NF == 12 && $4 == "ms" {
    printf "%s{\"cap_MiB\": %s, \"predicted_buckets\": %s, \"predicted_step_ms\": %s, \"predicted_hidden_pct\": %s, \"measured_step_ms\": %s, \"measured_hidden_pct\": %s}", sep, $1, $2, $8, $7 + 0, $10, $12 + 0; sep = ", "
  }' "$out/model.txt")
traced_hidden=$(sed -n 's/.*overlap: \([0-9.]*\)% of all-reduce.*/\1/p' "$out/trace-run.log" | tail -n 1)
plain=$(sed -n 's/^ours vs plain c10d all-reduce: plain\/ours = \([0-9.]*\) (geometric mean of \([0-9]*\) points; lowest \([0-9.]*\), highest \([0-9.]*\))$/{"geomean": \1, "points": \2, "lowest": \3, "highest": \4}/p' "$out/model.txt")
write_result cost_model "$command" "$(fit_members "$out/model.txt"), \"worlds\": [${worlds// /, }], \"steps\": $steps,
  \"plain_over_ours\": ${plain:-null}, \"traced_hidden_pct\": ${traced_hidden:-null},
  \"bucket_sweep\": [$sweep_json]"
