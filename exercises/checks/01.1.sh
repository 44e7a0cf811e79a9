#!/usr/bin/env bash
# exercise: 01.1 Which variable wins?
# kind: observation
# time: 10 min
# build: 01_join_group
# proves: the world size you wrote down is the one 01_join_group resolves when torchrun's and
#         Slurm's variables disagree.
source "$(dirname "$0")/lib.sh"
read_answer 01.1
RANK=3 WORLD_SIZE=4 SLURM_PROCID=2 SLURM_NTASKS=8 run 30 "$WORK/explain.log" 01_join_group --explain-env ||
  fail "01_join_group --explain-env failed: $(tail -n 3 "$WORK/explain.log")"
truth=$(sed -n 's/^ *world_size *= *\([0-9]*\).*/\1/p' "$WORK/explain.log")
[ -n "$truth" ] || fail "01_join_group --explain-env printed no world_size line"
[ "$ANSWER" = "$truth" ] || fail "you wrote '$ANSWER'; run the command of the exercise and read the world_size line"
pass "world size $truth: $(grep -E "^ *world_size" "$WORK/explain.log" | sed "s/^ *//")"
