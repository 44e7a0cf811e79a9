#!/usr/bin/env bash
# exercise: 05.5 Unused here, unused everywhere
# kind: observation
# time: 15 min
# build: 05_ddp 02_spawn
# proves: the number you wrote down is, for the page's run of --model mlp_branch at 2 ranks cut to
#         30 steps (the page shows 40, whose line gives 10 - 3 away), the
#         steps in which rank 0's forward skipped the aux head while the other rank used it: the
#         steps in which rank 0's aux.weight.grad() still got the bucket's value. The run prints
#         the steps unused on rank 0 and those unused on every rank; the answer is neither, but
#         follows from both and Note [Unused parameters] (only the second case leaves .grad()
#         untouched).
source "$(dirname "$0")/lib.sh"
read_answer 05.5
run 120 "$WORK/branch.log" 05_ddp --nproc-per-node 2 --model mlp_branch --train-samples 2048 --max-steps 30 \
  --find-unused-parameters --test-samples 64 --expect-accuracy 0 --out "$WORK/branch" --reset ||
  fail "05_ddp failed: $(tail -n 3 "$WORK/branch.log")"
line=$(last_match '^\[rank 0/2\] --find-unused-parameters: graph walked' "$WORK/branch.log")
read -r here everywhere < <(echo "$line" | sed -n 's/.*aux\.weight unused here in \([0-9]*\) step(s), on every rank in \([0-9]*\).*/\1 \2/p')
[ -n "$here" ] && [ -n "$everywhere" ] || fail "05_ddp printed no line about aux.weight: $(tail -n 3 "$WORK/branch.log")"
steps=$(echo "$line" | sed -n 's/.*graph walked \([0-9]*\) times.*/\1/p')
truth=$((here - everywhere))
[ "$ANSWER" = "$truth" ] ||
  fail "you wrote '$ANSWER'; write one number: the steps in which rank 0 skipped the head but aux.weight.grad() on rank 0 still got a gradient, which the other rank computed"
pass "aux.weight was unused on rank 0 in $here step(s) and on both ranks in $everywhere: in those $everywhere no rank had a gradient and DDP left .grad() untouched (marked unused everywhere); in the other $truth rank 1 used the head, so the bucket carried its gradient and rank 0's .grad() got the sum over the ranks that used it divided by 2, the world size (Note [Unused parameters]). In the remaining $((steps - here)) of the ${steps:-all the} steps rank 0 used the head itself"
