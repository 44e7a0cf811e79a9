#!/usr/bin/env bash
# exercise: 02.1 Who really failed?
# kind: observation
# time: 10 min
# build: 02_spawn
# proves: the two ranks you wrote down are, for a run the exercise gives no command for (rank 1
#         exits instead of hanging, the survivor left to fail by itself), the one the launcher's
#         report marks as the first failure and the one the flight recorder names.
source "$(dirname "$0")/lib.sh"
read_answer 02.1
run 60 "$WORK/exit.log" 02_spawn --nproc-per-node 2 --fail-mode exit --fail-rank 1 --on-failure wait --timeout 3
named=$(grep -o 'flight recorder: rank [0-9]* \(([^)]*) \)\{0,1\}is \(gone\|behind\)' "$WORK/exit.log" | head -n 1 | sed 's/^flight recorder: rank \([0-9]*\).*/\1/')
marked=$(sed -n 's/^ *\([0-9]*\) *\* .*/\1/p' "$WORK/exit.log" | head -n 1)
[ -n "$named" ] && [ -n "$marked" ] || fail "02_spawn did not print the report and the flight recorder's line: $(tail -n 3 "$WORK/exit.log")"
check_two_parts "two numbers for rank 1 exiting (--fail-mode exit --on-failure wait): the rank the report marks with * and the rank the flight recorder names (gone or behind)" \
  "the rank the report marks" "$marked" "the rank the flight recorder names" "$named"
pass "the report marks rank $marked, the flight recorder names rank $named"
