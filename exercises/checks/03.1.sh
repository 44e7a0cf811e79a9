#!/usr/bin/env bash
# exercise: 03.1 Bytes around the ring
# kind: observation
# time: 15 min
# build: 02_spawn 03_manual_allreduce
# proves: the two numbers you worked out are the bytes rank 2 and rank 1 send per step in the ring
#         all-reduce at world size 4, as 03_manual_allreduce counts them while it sends (whether
#         the four ranks send the same is the question's why). The exercise gives no command for 4
#         ranks: the chapter's run at 3 ranks is the one to learn from.
source "$(dirname "$0")/lib.sh"
read_answer 03.1
run 120 "$WORK/run.log" 02_spawn --nproc-per-node 4 -- "$B/03_manual_allreduce" --allreduce ring --steps 2 ||
  fail "03_manual_allreduce --allreduce ring did not pass its checks: $(grep -E 'WRONG|error' "$WORK/run.log" | head -n 2)"
sent() { sed -n "s/^\[rank $1\/4\] ring: sent \([0-9]*\) bytes per step.*/\1/p" "$WORK/run.log" | head -n 1; }
rank2=$(sent 2) rank1=$(sent 1)
[ -n "$rank2" ] && [ -n "$rank1" ] || fail "ranks 2 and 1 printed no 'ring: sent N bytes per step' line: $(tail -n 2 "$WORK/run.log")"
check_two_parts "rank 2's bytes per step at 4 ranks, a space, then rank 1's (two numbers)" \
  "rank 2's bytes" "$rank2" "rank 1's bytes" "$rank1" "count the chunks each rank sends of each gradient (Note [The ring all-reduce]), as the 3-rank run of the README counts them"
pass "rank 2 sends $rank2 bytes per step, rank 1 $rank1"
