#!/usr/bin/env bash
# exercise: 02.1 Who really failed?
# kind: observation
# time: 10 min
# build: 02_spawn
# proves: the two ranks you wrote down are the one the launcher's report marks as the first failure
#         and the one the flight recorder names as behind, when a rank hangs: not the same.
source "$(dirname "$0")/lib.sh"
read_answer 02.1
run 60 "$WORK/hang.log" 02_spawn --nproc-per-node 2 --fail-mode hang --fail-rank 1 --timeout 3
truth=$(grep -o 'rank [0-9]* is behind' "$WORK/hang.log" | head -n 1 | grep -o '[0-9]*')
marked=$(sed -n 's/^ *\([0-9]*\) *\* .*/\1/p' "$WORK/hang.log" | head -n 1)
[ -n "$truth" ] && [ -n "$marked" ] || fail "02_spawn did not print the report and the flight recorder's line: $(tail -n 3 "$WORK/hang.log")"
[ "$(echo $ANSWER)" = "$marked $truth" ] ||
  fail "you wrote '$ANSWER'; write the rank the report marks with * and the rank the flight recorder names as behind ('rank N is behind'), two numbers"
# Why they differ, from the run itself: the marked rank's own error, a timeout waiting for the other.
why=$(grep -m 1 "^\[rank $marked/2\] error on " "$WORK/hang.log" | grep -o '[^:]*failed: \[[^]]*\] Timed out waiting [0-9]*ms' | sed -e 's/ \[[^]]*\]//' -e 's/^ *//')
pass "the report marks rank $marked first: it failed first because it waited in a collective for rank $truth until --timeout ran out (${why:-its error names no timeout}); rank $truth, which the flight recorder names as behind, is the one that hung: debug rank $truth, not the first failure"
