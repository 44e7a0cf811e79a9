#!/usr/bin/env bash
# exercise: 05.10 Two ranks or one, on your laptop
# kind: observation
# time: 20 min
# build: 02_spawn 05_ddp allreduce_bench ddp_sim
# proves: your five figures (one rank's step t1, the shares s and a, one ring step's latency
#         alpha and the gradients' all-reduce time T) are what this machine measures when the
#         check makes the page's measurements itself (each three times; a figure passes within
#         three times the spread of its three runs, and never closer than a floor for a machine's
#         noise: 30 % for t1, T and alpha, 40 % for a, 0.15 for s); your ratio is ddp_sim's prediction from
#         your figures, to 0.02, and your yes or no what it says (two ranks beat one above 1). A
#         FAIL names the figure, never a measured value (it would be the answer). Then it
#         measures the two runs and shows how far your prediction was from them; a busy machine
#         measures two ranks lower, so that comparison is shown, not judged.
source "$(dirname "$0")/lib.sh"
read_answer 05.10
answer=$(echo $ANSWER)
num='[0-9]+(\.[0-9]+)?'
[[ $answer =~ ^($num)\ (-?$num)\ ($num)\ ($num)\ ($num)\ ($num)\ (yes|no)$ ]] ||
  fail "you wrote '$ANSWER'; write t1 (ms), s, a, alpha (us), T (us), your ratio, then yes or no: seven fields with spaces between"
t1=${BASH_REMATCH[1]} s=${BASH_REMATCH[3]} a=${BASH_REMATCH[5]} alpha=${BASH_REMATCH[7]} T=${BASH_REMATCH[9]}
ratio=${BASH_REMATCH[11]} verdict=${BASH_REMATCH[13]}
awk -v T="$T" -v al="$alpha" 'BEGIN { exit !(T > 2 * al) }' || fail "T ($T us) must be longer than its two latencies, 2 x alpha ($alpha us)"
read -r t2 predicted < <("$(dirname "$0")/two_ranks_prediction.sh" "$B" "$t1" "$s" "$a" "$alpha" "$T" 2> "$WORK/sim.txt")
[ -n "${predicted:-}" ] || fail "ddp_sim refused your figures: $(cat "$WORK/sim.txt")"
awk -v r="$ratio" -v p="$predicted" 'BEGIN { d = r - p; exit !(d <= 0.02 && d >= -0.02) }' ||
  fail "your ratio $ratio is not ddp_sim's prediction from your five figures: check G and 2 x t1 / t2 (step 4)"
awk -v r="$ratio" -v v="$verdict" 'BEGIN { exit !((r > 1) == (v == "yes")) }' ||
  fail "your ratio $ratio and your '$verdict' disagree: two ranks beat one when the ratio is above 1"
# The check on the machine: both runs on two cores, one thread a rank, 256 images a rank.
[ -x "$B/05_ddp" ] || fail "$B/05_ddp not found: build the course first (scripts/run.sh)"
export DDP_GPU_COUNT=0  # the CPU's cores and Gloo, on a GPU host too
pin=(); command -v taskset > /dev/null && [ "$(nproc)" -ge 2 ] && pin=(taskset -c 0,1)
rate() { sed -n 's/.*throughput: \([0-9.]*\) samples\/s.*/\1/p' "$1" | tail -n 1; }
# The page's measurements 1-3, each three times, as the page makes them.
bench() { OMP_NUM_THREADS=1 timeout -k 5 60 "${pin[@]}" "$B/02_spawn" --nproc-per-node 2 -- "$B/allreduce_bench" "$@"; }
for i in 1 2 3; do
  bench --interference 2143272 --compute matmul --rounds 20 > "$WORK/interference-$i.log" 2>&1 ||
    fail "allreduce_bench --interference failed: $(tail -n 2 "$WORK/interference-$i.log")"
  bench --min-bytes 4 --max-bytes 4 --compute-between-ms 2 --count mean > "$WORK/latency-$i.log" 2>&1 ||
    fail "allreduce_bench (the latency) failed: $(tail -n 2 "$WORK/latency-$i.log")"
  (cd "$WORK" && OMP_NUM_THREADS=1 timeout -k 5 120 "${pin[@]}" "$B/05_ddp" --model mlp --batch-size 256 --nproc-per-node 1 \
    --max-steps 100 --log-every 100000 --reset --timeout 60 --test-samples 200 --out "$WORK/t1-$i") > "$WORK/t1-$i.log" 2>&1 ||
    fail "05_ddp at one rank failed: $(tail -n 3 "$WORK/t1-$i.log")"
done
measured() {  # <figure>: its three measurements, one a line
  case $1 in
    t1) for i in 1 2 3; do awk -v r="$(rate "$WORK/t1-$i.log")" 'BEGIN { print 256 / r * 1000 }'; done ;;
    s) sed -n 's/.*interference s = \([-0-9.]*\).*/\1/p' "$WORK"/interference-?.log ;;
    a) sed -n 's/.*slowdown a = \([-0-9.]*\).*/\1/p' "$WORK"/interference-?.log ;;
    T) sed -n 's/.*all-reduce: \([0-9.]*\) us alone.*/\1/p' "$WORK"/interference-?.log ;;
    alpha) sed -n 's/.* B: plain \([0-9.]*\) us.*/\1/p' "$WORK"/latency-?.log | awk '{ print $1 / 2 }' ;;
  esac
}
# Within three times the spread of the three runs, or the floor: relative (30 %, 40 % for a) or, for s, whose
# value is near 0, absolute (0.15).
close() {  # <figure> <yours> <relative floor> <absolute floor>
  measured "$1" | awk -v x="$2" -v rel="$3" -v abs="$4" '
    { v[NR] = $1; lo = (NR == 1 || $1 < lo) ? $1 : lo; hi = (NR == 1 || $1 > hi) ? $1 : hi }
    END { if (NR != 3) exit 2; m = v[1] + v[2] + v[3] - lo - hi  # the median
          tol = 3 * (hi - lo); if (tol < rel * m) tol = rel * m; if (tol < abs) tol = abs
          d = x - m; exit !(d <= tol && d >= -tol) }'
}
for f in t1:$t1:0.3:0 s:$s:0:0.15 a:$a:0.4:0 alpha:$alpha:0.3:0 T:$T:0.3:0; do
  IFS=: read -r name yours rel abs <<< "$f"
  close "$name" "$yours" "$rel" "$abs" || {
    [ $? = 2 ] && fail "the check could not read its own measurement of $name (logs in $WORK)"
    fail "your $name ($yours) is not what this machine measures: make that measurement again as the page says (steps 1-3), on two cores, with nothing else running"; }
done
for n in 1 2; do
  (cd "$WORK" && OMP_NUM_THREADS=1 timeout -k 5 180 "${pin[@]}" "$B/05_ddp" --model mlp --batch-size 256 --nproc-per-node "$n" \
    --max-steps 200 --log-every 100000 --reset --timeout 120 --test-samples 200 --out "$WORK/run-$n") > "$WORK/mlp-$n.log" 2>&1 ||
    fail "05_ddp at $n rank(s) failed: $(tail -n 3 "$WORK/mlp-$n.log")"
  [ -n "$(rate "$WORK/mlp-$n.log")" ] || fail "05_ddp at $n rank(s) printed no throughput: $(tail -n 3 "$WORK/mlp-$n.log")"
done
measured=$(awk -v a="$(rate "$WORK/mlp-2.log")" -v b="$(rate "$WORK/mlp-1.log")" 'BEGIN { printf "%.2f", a / b }')
pass "ddp_sim predicts ${predicted}x from your figures; measured now, two ranks ran at ${measured}x one ($(awk -v r="$ratio" -v m="$measured" \
  'BEGIN { printf "%+.0f %%", (r / m - 1) * 100 }') off; on a machine busy with other work two ranks measure lower)"
