#!/usr/bin/env bash
# exercise: 05.10 Two ranks or one, on your laptop
# kind: observation
# time: 20 min
# build: 02_spawn 05_ddp allreduce_bench ddp_sim
# proves: your ratio is the prediction ddp_sim makes from the five figures you measured (one
#         rank's step t1, the shares s and a, one ring step's latency alpha and the gradients'
#         all-reduce time T), as the page says to make it, to 0.02, and your yes or no is what it
#         says (two ranks beat one when the ratio is above 1). Then it measures the two runs here,
#         on two cores, and shows how far your prediction was from them; a busy machine measures
#         two ranks lower, so that comparison is shown, not judged.
source "$(dirname "$0")/lib.sh"
read_answer 05.10
answer=$(echo $ANSWER)
num='[0-9]+(\.[0-9]+)?'
[[ $answer =~ ^($num)\ ($num)\ ($num)\ ($num)\ ($num)\ ($num)\ (yes|no)$ ]] ||
  fail "you wrote '$ANSWER'; write t1 (ms), s, a, alpha (us), T (us), your ratio, then yes or no, e.g. 9.5 0.2 2.5 330 1800 1.6 yes"
t1=${BASH_REMATCH[1]} s=${BASH_REMATCH[3]} a=${BASH_REMATCH[5]} alpha=${BASH_REMATCH[7]} T=${BASH_REMATCH[9]}
ratio=${BASH_REMATCH[11]} verdict=${BASH_REMATCH[13]}
awk -v T="$T" -v al="$alpha" 'BEGIN { exit !(T > 2 * al) }' || fail "T ($T us) must be longer than its two latencies, 2 x alpha ($alpha us)"
G=$(awk -v T="$T" -v al="$alpha" 'BEGIN { printf "%.6g", 8 * 2143272 / (T - 2 * al) / 1000 }')
run 30 "$WORK/sim.txt" ddp_sim --profiles-dir "$ROOT/bench/profiles" --model mlp --nodes 1 --gpus-per-node 2 --stop-vote \
  --compute-ms "$t1" --interference "$s" --allreduce-slowdown "$a" --intra-latency-us "$alpha" --intra-gbps "$G" ||
  fail "ddp_sim refused your figures: $(tail -n 2 "$WORK/sim.txt")"
t2=$(sed -n 's/^step: \([0-9.]*\) ms$/\1/p' "$WORK/sim.txt")
[ -n "$t2" ] || fail "ddp_sim printed no step: $(tail -n 3 "$WORK/sim.txt")"
predicted=$(awk -v a="$t1" -v b="$t2" 'BEGIN { printf "%.2f", 2 * a / b }')
awk -v r="$ratio" -v p="$predicted" 'BEGIN { d = r - p; exit !(d <= 0.02 && d >= -0.02) }' ||
  fail "from your figures ddp_sim's step for two ranks is $t2 ms: the ratio is not $ratio. Check G and 2 x t1 / t2"
awk -v r="$ratio" -v v="$verdict" 'BEGIN { exit !((r > 1) == (v == "yes")) }' ||
  fail "your ratio $ratio and your '$verdict' disagree: two ranks beat one when the ratio is above 1"
# The check on the machine: both runs on two cores, one thread a rank, 256 images a rank.
[ -x "$B/05_ddp" ] || fail "$B/05_ddp not found: build the course first (scripts/run.sh)"
export DDP_GPU_COUNT=0  # the CPU's cores and Gloo, on a GPU host too
pin=(); command -v taskset > /dev/null && [ "$(nproc)" -ge 2 ] && pin=(taskset -c 0,1)
rate() { sed -n 's/.*throughput: \([0-9.]*\) samples\/s.*/\1/p' "$1" | tail -n 1; }
for n in 1 2; do
  (cd "$WORK" && OMP_NUM_THREADS=1 timeout -k 5 180 "${pin[@]}" "$B/05_ddp" --model mlp --batch-size 256 --nproc-per-node "$n" \
    --max-steps 200 --log-every 100000 --reset --timeout 120 --test-samples 200 --out "$WORK/run-$n") > "$WORK/mlp-$n.log" 2>&1 ||
    fail "05_ddp at $n rank(s) failed: $(tail -n 3 "$WORK/mlp-$n.log")"
  [ -n "$(rate "$WORK/mlp-$n.log")" ] || fail "05_ddp at $n rank(s) printed no throughput: $(tail -n 3 "$WORK/mlp-$n.log")"
done
measured=$(awk -v a="$(rate "$WORK/mlp-2.log")" -v b="$(rate "$WORK/mlp-1.log")" 'BEGIN { printf "%.2f", a / b }')
pass "ddp_sim predicts ${predicted}x from your figures; measured now, two ranks ran at ${measured}x one ($(awk -v r="$ratio" -v m="$measured" \
  'BEGIN { printf "%+.0f %%", (r / m - 1) * 100 }') off; on a machine busy with other work two ranks measure lower)"
