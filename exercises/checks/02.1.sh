#!/usr/bin/env bash
# exercise: 02.1 Who really failed?
# kind: observation
# time: 10 min
# build: 02_spawn
# proves: the rank you wrote down is the one the flight recorder names as behind when a rank hangs,
#         which is not the rank the launcher's report marks as the first failure.
source "$(dirname "$0")/lib.sh"
read_answer 02.1
run 60 "$WORK/hang.log" 02_spawn --nproc-per-node 3 --fail-mode hang --fail-rank 1 --timeout 3
truth=$(grep -o 'rank [0-9]* is behind' "$WORK/hang.log" | head -n 1 | grep -o '[0-9]*')
marked=$(sed -n 's/^ *\([0-9]*\) *\* .*/\1/p' "$WORK/hang.log" | head -n 1)
[ -n "$truth" ] && [ -n "$marked" ] || fail "02_spawn did not print the report and the flight recorder's line: $(tail -n 3 "$WORK/hang.log")"
[ "$ANSWER" = "$truth" ] || fail "you wrote '$ANSWER'; read the flight recorder's part of the first error line ('rank N is behind')"
pass "the report marks rank $marked first; the flight recorder names rank $truth, the one that hung"
