#!/usr/bin/env bash
# exercise: 05.10 Two ranks or one, on your laptop
# kind: observation
# time: 20 min
# build: 02_spawn 05_ddp allreduce_bench ddp_sim
# proves: your prediction, made from your machine's measured interference with ddp_sim, says
#         what two ranks of the MLP against one really do here: on two cores (taskset 0,1), one
#         thread per rank, 256 images a rank, 200 steps each, the measured samples/s at two
#         ranks over one. The
#         yes or no must be the measurement's (either, when it is within 5 % of 1), and your
#         ratio within 30 % of the measured one and on the same side of 1 as your yes or no.
source "$(dirname "$0")/lib.sh"
read_answer 05.10
answer=$(echo $ANSWER)
[[ $answer =~ ^([0-9]+(\.[0-9]+)?)\ (yes|no)$ ]] ||
  fail "you wrote '$ANSWER'; write your predicted samples/s at two ranks over one rank, then yes or no (do two ranks beat one?), e.g. 0.7 no"
ratio=${BASH_REMATCH[1]} verdict=${BASH_REMATCH[3]}
awk -v r="$ratio" -v v="$verdict" 'BEGIN { exit !((r > 1) == (v == "yes")) }' ||
  fail "your ratio $ratio and your '$verdict' disagree: two ranks beat one when the ratio is above 1"
command -v taskset > /dev/null || fail "taskset not found (util-linux): the check runs both on two cores"
[ "$(nproc)" -ge 2 ] || fail "this machine has $(nproc) core: the exercise needs two"
[ -x "$B/05_ddp" ] || fail "$B/05_ddp not found: build the course first (scripts/run.sh)"
export DDP_GPU_COUNT=0  # the CPU's cores and Gloo, on a GPU host too
rate() { sed -n 's/.*throughput: \([0-9.]*\) samples\/s.*/\1/p' "$1" | tail -n 1; }
for n in 1 2; do
  (cd "$WORK" && OMP_NUM_THREADS=1 timeout -k 5 180 taskset -c 0,1 "$B/05_ddp" --model mlp --batch-size 256 --nproc-per-node "$n" --max-steps 200 \
    --log-every 100000 --reset --timeout 120 --test-samples 200 --out "$WORK/run-$n") > "$WORK/mlp-$n.log" 2>&1 ||
    fail "05_ddp at $n rank(s) failed: $(tail -n 3 "$WORK/mlp-$n.log")"
  [ -n "$(rate "$WORK/mlp-$n.log")" ] || fail "05_ddp at $n rank(s) printed no throughput: $(tail -n 3 "$WORK/mlp-$n.log")"
done
measured=$(awk -v a="$(rate "$WORK/mlp-2.log")" -v b="$(rate "$WORK/mlp-1.log")" 'BEGIN { printf "%.2f", a / b }')
awk -v m="$measured" -v v="$verdict" 'BEGIN { exit !((m - 1 < 0.05 && 1 - m < 0.05) || ((m > 1) == (v == "yes"))) }' ||
  fail "you predicted '$verdict'; measured here, two ranks ran at ${measured}x one. Which of your inputs was furthest from this run: the compute, the all-reduce, or its interference?"
awk -v m="$measured" -v r="$ratio" 'BEGIN { d = r / m - 1; exit !(d <= 0.3 && d >= -0.3) }' ||
  fail "your '$verdict' is right, but your ratio $ratio is more than 30 % from the ${measured}x measured here: a prediction from your measurements, not a guess"
pass "two ranks ran at ${measured}x one rank; you predicted ${ratio}x"
