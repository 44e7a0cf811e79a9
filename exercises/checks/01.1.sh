#!/usr/bin/env bash
# exercise: 01.1 Which variable wins?
# kind: observation
# time: 10 min
# build: 01_join_group
# proves: the rank and world size you wrote down are the ones 01_join_group resolves for a setting
#         the exercise gives no command for: torchrun's RANK without its WORLD_SIZE, inside a Slurm
#         job's variables, and no flag (each value is resolved on its own: docs/settings.md).
source "$(dirname "$0")/lib.sh"
read_answer 01.1
# Only the variables of the exercise's setting: none of torchrun's or Slurm's from the caller.
unset WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK MASTER_ADDR MASTER_PORT $(compgen -e | grep -E '^(SLURM_|TORCHELASTIC_)')
RANK=3 SLURM_PROCID=2 SLURM_NTASKS=8 run 30 "$WORK/explain.log" 01_join_group --explain-env ||
  fail "01_join_group --explain-env failed: $(tail -n 3 "$WORK/explain.log")"
rank=$(sed -n 's/^ *rank *= *\([0-9]*\).*/\1/p' "$WORK/explain.log")
world=$(sed -n 's/^ *world_size *= *\([0-9]*\).*/\1/p' "$WORK/explain.log")
[ -n "$rank" ] && [ -n "$world" ] || fail "01_join_group --explain-env printed no rank or world_size line"
check_two_parts "the rank, a space and the world size (two numbers) for RANK=3 SLURM_PROCID=2 SLURM_NTASKS=8 and no flag" \
  "the rank" "$rank" "the world size" "$world" "decide each value on its own by the order of docs/settings.md"
pass "rank $rank, world size $world"
