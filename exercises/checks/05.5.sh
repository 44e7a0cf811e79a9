#!/usr/bin/env bash
# exercise: 05.5 Unused here, unused everywhere
# kind: observation
# time: 15 min
# build: 05_ddp 02_spawn
# proves: the number you wrote down is the steps, in the page's run of --model mlp_branch at 2
#         ranks cut to 30 steps (the page shows 40), in which rank 0's forward skipped the aux
#         head and rank 0's aux.weight.grad() still got a value from the bucket.
source "$(dirname "$0")/lib.sh"
read_answer 05.5
run 120 "$WORK/branch.log" 05_ddp --nproc-per-node 2 --model mlp_branch --train-samples 2048 --max-steps 30 \
  --find-unused-parameters --test-samples 64 --expect-accuracy 0 --out "$WORK/branch" --reset ||
  fail "05_ddp failed: $(tail -n 3 "$WORK/branch.log")"
line=$(last_match '^\[rank 0/2\] --find-unused-parameters: graph walked' "$WORK/branch.log")
truth=$(echo "$line" | sed -n 's/.*aux\.weight unused here in \([0-9]*\) step(s), on every rank in \([0-9]*\).*/\1 \2/p' | awk '{ print $1 - $2 }')
[ -n "$truth" ] || fail "05_ddp printed no line about aux.weight: $(tail -n 3 "$WORK/branch.log")"
[[ $ANSWER =~ ^[0-9]+$ ]] || fail "you wrote '$ANSWER'; write one number of steps"
[ "$ANSWER" = "$truth" ] ||
  fail "'$ANSWER' is not right: in how many of the 30 steps did rank 0 skip the head while aux.weight.grad() still got a value? Work it out from the run's last line and Note [Unused parameters]"
pass "$truth step(s)"
