#!/usr/bin/env bash
# exercise: 05.5 Unused here, unused everywhere
# kind: observation
# time: 15 min
# build: 05_ddp 02_spawn
# proves: the two numbers you wrote down are, in the page's run of --model mlp_branch at 2 ranks
#         cut to 30 steps (the page shows 40), the steps in which rank 0's forward skipped the
#         aux head and rank 0's aux.weight.grad() still got a value from the bucket, and the
#         steps in which exactly one rank's forward used the head (its gradient alone, halved).
source "$(dirname "$0")/lib.sh"
read_answer 05.5
run 120 "$WORK/branch.log" 05_ddp --nproc-per-node 2 --model mlp_branch --train-samples 2048 --max-steps 30 \
  --find-unused-parameters --test-samples 64 --expect-accuracy 0 --out "$WORK/branch" --reset ||
  fail "05_ddp failed: $(tail -n 3 "$WORK/branch.log")"
# Each rank's "unused here in U step(s), on every rank in E" for aux.weight: E is the same on both.
counts() {
  last_match "^\[rank $1/2\] --find-unused-parameters: graph walked" "$2" |
    sed -n 's/.*aux\.weight unused here in \([0-9]*\) step(s), on every rank in \([0-9]*\).*/\1 \2/p'
}
read -r u0 e0 <<< "$(counts 0 "$WORK/branch.log")"
read -r u1 e1 <<< "$(counts 1 "$WORK/branch/rank1.log")"
[ -n "${u0:-}" ] && [ -n "${u1:-}" ] && [ "$e0" = "$e1" ] ||
  fail "05_ddp printed no line about aux.weight on both ranks: $(tail -n 3 "$WORK/branch.log")"
truth="$((u0 - e0)) $((u0 - e0 + u1 - e1))"
answer=$(echo "$ANSWER" | tr -s ' ')
[[ $answer =~ ^[0-9]+\ [0-9]+$ ]] || fail "you wrote '$ANSWER'; write two numbers of steps"
[ "$answer" = "$truth" ] ||
  fail "'$answer' is not right: work (a) and (b) out from both ranks' lines and Note [Unused parameters]"
pass "$truth step(s)"
