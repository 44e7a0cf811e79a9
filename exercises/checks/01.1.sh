#!/usr/bin/env bash
# exercise: 01.1 Which variable wins?
# kind: observation
# time: 10 min
# build: 01_join_group
# proves: the rank and world size you wrote down are the ones 01_join_group resolves when a flag,
#         torchrun's variables and Slurm's disagree.
source "$(dirname "$0")/lib.sh"
read_answer 01.1
RANK=3 WORLD_SIZE=4 SLURM_PROCID=2 SLURM_NTASKS=8 run 30 "$WORK/explain.log" 01_join_group --rank 1 --explain-env ||
  fail "01_join_group --explain-env failed: $(tail -n 3 "$WORK/explain.log")"
rank=$(sed -n 's/^ *rank *= *\([0-9]*\).*/\1/p' "$WORK/explain.log")
world=$(sed -n 's/^ *world_size *= *\([0-9]*\).*/\1/p' "$WORK/explain.log")
[ -n "$rank" ] && [ -n "$world" ] || fail "01_join_group --explain-env printed no rank or world_size line"
[ "$(echo $ANSWER)" = "$rank $world" ] ||
  fail "you wrote '$ANSWER'; write the rank, a space and the world size (two numbers), as the command of the exercise resolves them"
pass "rank $rank, world size $world: $(grep -E "^ *(rank|world_size) " "$WORK/explain.log" | sed "s/^ *//" | tr -s ' ' | paste -sd ';')"
