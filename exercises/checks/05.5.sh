#!/usr/bin/env bash
# exercise: 05.5 Unused here, unused everywhere
# kind: observation
# time: 15 min
# build: 05_ddp 02_spawn
# proves: the two numbers you wrote down are, for a run of --model mlp_branch at 4 ranks, the
#         steps in which rank 0's forward skipped the aux head and the steps in which every
#         rank's did (the second case leaves .grad() untouched; Note [Unused parameters]).
source "$(dirname "$0")/lib.sh"
read_answer 05.5
run 120 "$WORK/branch.log" 05_ddp --nproc-per-node 4 --model mlp_branch --train-samples 2048 --max-steps 40 \
  --find-unused-parameters --test-samples 64 --expect-accuracy 0 --out "$WORK/branch" --reset ||
  fail "05_ddp failed: $(tail -n 3 "$WORK/branch.log")"
line=$(last_match '^\[rank 0/4\] --find-unused-parameters: graph walked' "$WORK/branch.log")
truth=$(echo "$line" | sed -n 's/.*aux\.weight unused here in \([0-9]*\) step(s), on every rank in \([0-9]*\).*/\1 \2/p')
[ -n "$truth" ] || fail "05_ddp printed no line about aux.weight: $(tail -n 3 "$WORK/branch.log")"
[ "$ANSWER" = "$truth" ] ||
  fail "you wrote '$ANSWER'; write two numbers for aux.weight: the steps it was unused on rank 0, then on every rank"
pass "aux.weight: unused on rank 0 in ${truth% *} step(s), on all four ranks in ${truth#* }. Only a step where every rank skipped the head leaves .grad() untouched (nothing to average: DDP marks it unused everywhere); where rank 0 alone skipped it, the bucket still carries the other ranks' gradients, and rank 0's .grad() gets their sum divided by 4 (Note [Unused parameters])"
