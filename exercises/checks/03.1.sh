#!/usr/bin/env bash
# exercise: 03.1 Bytes around the ring
# kind: observation
# time: 15 min
# build: 02_spawn 03_manual_allreduce
# proves: the number you worked out is the number of bytes rank 2 sends per step in the ring
#         all-reduce at world size 4, as 03_manual_allreduce counts them while it sends. The
#         exercise gives no command for 4 ranks: the chapter's run at 3 ranks is the one to learn from.
source "$(dirname "$0")/lib.sh"
read_answer 03.1
run 120 "$WORK/run.log" 02_spawn --nproc-per-node 4 -- "$B/03_manual_allreduce" --allreduce ring --steps 2 ||
  fail "03_manual_allreduce --allreduce ring did not pass its checks: $(grep -E 'WRONG|error' "$WORK/run.log" | head -n 2)"
truth=$(sed -n 's/^\[rank 2\/4\] ring: sent \([0-9]*\) bytes per step.*/\1/p' "$WORK/run.log" | head -n 1)
[ -n "$truth" ] || fail "rank 2 printed no 'ring: sent N bytes per step' line: $(tail -n 2 "$WORK/run.log")"
[ "$ANSWER" = "$truth" ] || fail "you wrote '$ANSWER'; count the chunks rank 2 sends of each gradient (Note [The ring all-reduce]) at 4 ranks, as the 3-rank run of the README counts them"
# The question's why (ranks 0 and 1 send 4 bytes more), with every rank's count from the run.
pass "rank 2 sends $truth bytes per step"
