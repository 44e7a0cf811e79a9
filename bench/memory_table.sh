#!/usr/bin/env bash
# Memory per rank, measured beside the formula: for the MLP with AdamW (k = 2 state tensors per
# parameter) and with SGD's momentum (k = 1), at worlds 1 to 4, three steps of DDP (05_ddp), of
# ZeRO-1 (05_ddp --zero) and of FSDP (07_fsdp); one Markdown table per optimizer: the bytes of
# parameters, gradients and optimizer state that the ZeRO paper's formula gives each rank, their
# sum, the optimizer state of the fullest rank and the peak of tensors of the largest rank, both
# as the runs printed them (Note [What each rank holds] in 07_fsdp/memory_report.h; the page:
# docs/memory.md).
# Usage: bench/memory_table.sh [--quick] [build folder, default $DDP_BUILD_DIR, else build-cpu]
# --quick (the tests): worlds 1 and 2 only.
# Writes the table's figures to results/memory_table.json (scripts/results.sh), which the pages
# cite; --quick writes into a scratch folder instead (DDP_RESULTS_DIR overrides either).
# It builds nothing: the folder must hold 05_ddp and 07_fsdp (scripts/build.sh cpu 05_ddp 07_fsdp).
#
# The formula (float32, no master copy, as this course trains), for Ψ parameters on N ranks:
#   DDP     4Ψ + 4Ψ + 4kΨ         every rank holds everything
#   ZeRO-1  4Ψ + 4Ψ + 4kΨ/N       the optimizer state sharded
#   FSDP    (4Ψ + 4Ψ + 4kΨ)/N     all three sharded (ZeRO-3)
# and the paper's own, mixed precision with Adam (2Ψ of fp16 parameters, 2Ψ of fp16 gradients,
# KΨ of fp32 master weights, momentum and variance, K = 12), divided the same way, printed once.
#
# Note [Why the peak exceeds the formula]
# The formula counts the model's state: what a rank keeps from one step to the next. The peak
# (TensorMemory, Note [A memory limit on a CPU] in common/compute/tensor_memory.h) counts every
# tensor training allocated, at its worst moment, and a step allocates more than the state:
#   - activations: each layer's output, kept from forward until backward has used it; neither
#     ZeRO nor FSDP shards them (each rank computes its own batch whole);
#   - DDP's buckets: 05 keeps each gradient in .grad() and again in the flat bucket it
#     all-reduces (it prints "gradient memory: ... in buckets + ... in .grad()"), 4Ψ more than
#     the formula's one copy (PyTorch's gradient_as_bucket_view=True avoids it, and so does 05's
#     --gradient-as-bucket-view, which this table leaves at its default, off); ZeRO-1 is 05's DDP
#     with the state sharded, so it pays the same;
#   - FSDP: the unit it computes, gathered whole (and with prefetch the next one too), and in
#     backward that unit's whole gradients and the reduce-scatter's buffers before they are cut
#     to this rank's shard. Its peak comes in the first unit's reduce-scatter, the last of
#     backward (Note [What each rank holds]): then the activations are freed, and what is not
#     sharded is fc1's whole gradient, the reduce-scatter's input and the batch's images;
#   - temporaries: the loss, the optimizer's intermediate results, the collectives' buffers.
# So the peak sits above the formula's sum, and with FSDP falls more slowly than 1/N: what is
# not sharded stays.
set -euo pipefail
# Gloo on the CPU's cores, on a GPU host too: no program here may default to NCCL and a GPU.
export DDP_GPU_COUNT=0
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/stop.sh"  # Ctrl-C: this script and every run it started stop (Note [Stop means stop])
quick=
if [ "${1:-}" = --quick ]; then quick=1; shift; fi
bin=${1:-${DDP_BUILD_DIR:-$root/build-cpu}}
[ -d "$bin" ] || { echo "memory_table.sh: no build folder $bin (usage: bench/memory_table.sh [--quick] [build folder])" >&2; exit 2; }
bin=$(cd "$bin" && pwd)
for program in 05_ddp 07_fsdp; do
  [ -x "$bin/$program" ] || { echo "memory_table.sh: no $program in $bin: build it first (scripts/build.sh cpu 05_ddp 07_fsdp)" >&2; exit 2; }
done
worlds=(1 2 3 4)
[ -n "$quick" ] && worlds=(1 2)
scratch=$(mktemp -d "${TMPDIR:-/tmp}/memory_table.XXXXXX")
trap 'rm -rf "$scratch"' EXIT

# Three steps: the optimizer's state is created in the first, and from the second on each step
# reaches the same peak (the variants with one step and six, below). One thread per rank, as the
# other benchmarks here.
train=(--train-samples 2048 --batch-size 32 --warmup-steps 5 --max-steps 3 --test-samples 200 --expect-accuracy 0 --timeout 30)

# run <name> <program> <flags...>: the run's log is $scratch/<name>.log; a failed run stops the
# script with its log. BATCH and STEPS, when set, replace the table's 32 images and 3 steps.
run() {
  local name=$1 program=$2 args=() i
  shift 2
  for ((i = 0; i < ${#train[@]}; ++i)); do
    args+=("${train[$i]}")
    case ${train[$i]} in
      --batch-size) i=$((i + 1)); args+=("${BATCH:-${train[$i]}}") ;;
      --max-steps) i=$((i + 1)); args+=("${STEPS:-${train[$i]}}") ;;
    esac
  done
  OMP_NUM_THREADS=1 "$bin/$program" "$@" "${args[@]}" --out "$scratch/$name" > "$scratch/$name.log" 2>&1 ||
    { echo "memory_table.sh: $program $* failed; its output:" >&2; cat "$scratch/$name.log" >&2; exit 1; }
}
# The largest number that a pattern's group captures in a log, from <count> lines (one a rank), or
# from at least one with "rank 0" (a line only rank 0 prints).
largest() {  # largest <sed pattern with one group> <count or "rank 0"> <log>
  local values found
  values=$(sed -n "s/$1/\\1/p" "$3")
  found=$(printf '%s\n' "$values" | grep -c . || true)
  if [ "$2" = "rank 0" ] && [ "$found" -ge 1 ] || [ "$found" = "$2" ]; then
    printf '%s\n' "$values" | sort -g | tail -n 1
  else
    echo "memory_table.sh: expected $2 line(s) matching '$1' in $3, found $found:" >&2
    cat "$3" >&2
    exit 1
  fi
}
peak_of() { largest '.*memory: peak of the tensors training allocated \([0-9.]*\) MiB.*' "$1" "$2"; }
mib() { awk -v b="$1" 'BEGIN { printf "%.2f", b / 1048576 }'; }

source "$root/scripts/results.sh"
[ -n "$quick" ] && export DDP_RESULTS_DIR=${DDP_RESULTS_DIR:-$scratch}
json_rows="" sep=$',\n    '  # the rows of results/memory_table.json
psi=
for optimizer in adamw sgd; do
  if [ "$optimizer" = adamw ]; then
    k=2 name="AdamW" opt=(--optimizer adamw --lr 1e-3)
  else
    k=1 name="SGD with momentum 0.9" opt=(--optimizer sgd --momentum 0.9)
  fi
  rows=()
  for strategy in DDP ZeRO-1 FSDP; do
    for n in "${worlds[@]}"; do
      tag=$optimizer-$strategy-$n log=$scratch/$optimizer-$strategy-$n.log
      case $strategy in
        DDP) run "$tag" 05_ddp --nproc-per-node "$n" "${opt[@]}" --memory-limit-mb 100000 ;;
        ZeRO-1) run "$tag" 05_ddp --nproc-per-node "$n" "${opt[@]}" --memory-limit-mb 100000 --zero ;;
        FSDP) run "$tag" 07_fsdp --nproc-per-node "$n" "${opt[@]}" ;;
      esac
      # Ψ as the first run printed it; every later run must train the same model.
      if [ "$strategy" = FSDP ]; then
        this=$(sed -n 's/^\[rank 0\/[0-9]*\] model mlp: [0-9]* units: //p' "$log" |
          grep -o '([0-9]* elements' | awk '{ s += substr($1, 2) } END { print s + 0 }')
      else
        this=$(sed -n 's/^\[rank 0\/[0-9]*\] model mlp: \([0-9]*\) parameters.*/\1/p' "$log")
      fi
      [ -n "$psi" ] || psi=$this
      [ "$this" = "$psi" ] || { echo "memory_table.sh: $log trained $this parameters, the first run $psi" >&2; exit 1; }
      # The formula's bytes per rank: parameters, gradients, optimizer state.
      read -r p g s < <(awk -v psi="$psi" -v k="$k" -v n="$n" -v st="$strategy" 'BEGIN {
        p = 4 * psi; g = 4 * psi; s = 4 * k * psi
        if (st == "ZeRO-1") s /= n
        if (st == "FSDP") { p /= n; g /= n; s /= n }
        printf "%.17g %.17g %.17g\n", p, g, s }')
      sum=$(awk -v p="$p" -v g="$g" -v s="$s" 'BEGIN { printf "%.17g", p + g + s }')
      # The optimizer state of the fullest rank, as the run printed it (05 prints it only with
      # --zero; 07 prints rank 0's shards, and rank 0's are the longest: each unit is cut into
      # shards of ceil(elements / N), the last one shorter).
      case $strategy in
        DDP) fullest="—" ;;
        ZeRO-1)
          state=$(largest '.*ZeRO-1: optimizer state on this rank \([0-9]*\) bytes of.*' "$n" "$log")
          fullest=$(mib "$state") ;;
        FSDP)
          state=$(largest '.*memory: this rank.s shards: .* gradients, \([0-9]*\) optimizer state.*' "rank 0" "$log")
          fullest=$(mib $((4 * state)))
          # 07 prints the formula too: it must be ours.
          printed=$(sed -n 's/^\[rank 0\/[0-9]*\] memory: .*the formula 4Ψ(2+k)\/N: \([0-9.]*\) MiB.*/\1/p' "$log")
          [ "$printed" = "$(mib "$sum")" ] ||
            { echo "memory_table.sh: 07_fsdp printed the formula as '$printed' MiB at N = $n, k = $k; this script $(mib "$sum")" >&2; exit 1; } ;;
      esac
      peak=$(peak_of "$n" "$log")
      rows+=("| $strategy | $n | $(mib "$p") | $(mib "$g") | $(mib "$s") | $(mib "$sum") | $fullest | $peak |")
      json_rows+="${json_rows:+$sep}{\"optimizer\": \"$optimizer\", \"strategy\": \"$strategy\", \"N\": $n, \"parameters_MiB\": $(mib "$p"), \"gradients_MiB\": $(mib "$g"), \"optimizer_state_MiB\": $(mib "$s"), \"sum_MiB\": $(mib "$sum"), \"fullest_state_MiB\": $([ "$fullest" = "—" ] && echo null || echo "$fullest"), \"peak_MiB\": $peak}"
    done
  done
  echo "**MLP with $name (k = $k), MiB per rank**"
  echo
  echo "| strategy | N | parameters (formula) | gradients (formula) | optimizer state (formula) | sum (formula) | optimizer state, fullest rank (run) | peak of tensors, largest rank (run) |"
  echo "|---|---|---|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
  echo
done

# The paper's mixed-precision form for the same Ψ (2Ψ + 2Ψ + KΨ, K = 12), divided as above: its
# line for the page, then the same figures for the result file, {"DDP": [...], "ZeRO-1": [...], "FSDP": [...]}.
{ read -r paper_line; read -r paper; } < <(awk -v psi="$psi" -v list="${worlds[*]}" 'BEGIN {
  m = 1048576; nw = split(list, w, " ")
  for (i = 1; i <= nw; ++i) {
    n = w[i]; sep = i > 1 ? " / " : ""; jsep = i > 1 ? ", " : ""
    d = sprintf("%.2f", 16 * psi / m); o = sprintf("%.2f", (4 * psi + 12 * psi / n) / m); f = sprintf("%.2f", 16 * psi / n / m)
    ns = ns sep n; ddp = ddp sep d; os = os sep o; all = all sep f
    jddp = jddp jsep d; jos = jos jsep o; jall = jall jsep f
  }
  printf "The ZeRO paper%ss own form (Rajbhandari et al., ZeRO, SC 2020, section 5 / Figure 1): mixed precision, 2Ψ + 2Ψ + KΨ bytes with K = 12 (Adam), ", "\047"
  printf "for Ψ = %d, MiB per rank at N = %s: DDP %s; ZeRO-1 (P_os in the paper: optimizer state partitioned, 2Ψ + 2Ψ + KΨ/N) %s; FSDP (P_os+g+p: optimizer state, gradients and parameters partitioned, (2 + 2 + K)Ψ/N) %s.\n", psi, ns, ddp, os, all
  printf "{\"DDP\": [%s], \"ZeRO-1\": [%s], \"FSDP\": [%s]}\n", jddp, jos, jall
}')
echo "$paper_line"
# Note [The peak's parts, one flag at a time]
# Beside the table (not with --quick), runs each one flag away from a row, to tell the peak's
# parts apart (docs/memory.md, "What the table says"): four times the batch (activations and
# images), FSDP's prefetch depth, 05's --gradient-as-bucket-view (one copy of the gradients
# less), one step and six (the optimizer's state is created in the first).
variants=""
if [ -z "$quick" ]; then
  variant() {  # variant <name> <ranks> <program> <flags...>: its peak, the largest rank's
    local name=$1 n=$2
    shift 2
    run "variant-$name" "$@" --nproc-per-node "$n"
    variants+="${variants:+, }\"$name\": $(peak_of "$n" "$scratch/variant-$name.log")"
  }
  adamw=(--optimizer adamw --lr 1e-3) sgd=(--optimizer sgd --momentum 0.9) limit=(--memory-limit-mb 100000)
  BATCH=128 variant ddp_1_adamw_batch_128 1 05_ddp "${adamw[@]}" "${limit[@]}"
  BATCH=128 variant fsdp_4_adamw_batch_128 4 07_fsdp "${adamw[@]}"
  variant fsdp_4_adamw_prefetch_0 4 07_fsdp "${adamw[@]}" --prefetch 0
  variant fsdp_4_adamw_prefetch_3 4 07_fsdp "${adamw[@]}" --prefetch 3
  for n in 1 2; do
    variant "ddp_${n}_adamw_bucket_view" "$n" 05_ddp "${adamw[@]}" "${limit[@]}" --gradient-as-bucket-view
    variant "ddp_${n}_sgd_bucket_view" "$n" 05_ddp "${sgd[@]}" "${limit[@]}" --gradient-as-bucket-view
  done
  STEPS=1 variant ddp_1_adamw_steps_1 1 05_ddp "${adamw[@]}" "${limit[@]}"
  STEPS=6 variant ddp_1_adamw_steps_6 1 05_ddp "${adamw[@]}" "${limit[@]}"
  echo "One flag away from a row (peaks, MiB, the largest rank): ${variants//\"/}"
fi
write_result memory_table "bench/memory_table.sh${quick:+ --quick}" "\"psi\": $psi, \"paper_MiB\": $paper, \"rows\": [
    $json_rows]${variants:+, \"variants\": {$variants\}}"
