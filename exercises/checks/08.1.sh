#!/usr/bin/env bash
# exercise: 08.1 Shrink only
# kind: coding
# time: 25 min
# build: 08_fault_tolerance
# proves: with --shrink-only (a launcher flag, handed to its lighthouse), the first quorum still
#         forms of all three replicas; after it, a replica outside the last quorum joins none:
#         r3, started at once when r1 is killed in step 8's all-reduce, is in no quorum the
#         lighthouse issues, and ends saying the run ended without it, while the run's own checks
#         (the step logs, the replay) pass. Then the lighthouse alone, started by hand with
#         --shrink-only, and three replicas: one stopped until the others have formed a quorum
#         without it and then let go on (in the first quorum, not the last) comes back into none,
#         nor does a fourth started while they train; the two train on alone. Without the flag
#         nothing changed: the replacement joins and heals from a survivor.
source "$(dirname "$0")/lib.sh"
one_line() { tr '\n' ' ' | sed 's/ *$//'; }  # a FAIL is one line: what it quotes too
common=(--replicas 3 --inject r1:allreduce@8 --replace-after 0 --steps 100 --step-ms 50)
run 120 "$WORK/shrink.log" 08_fault_tolerance "${common[@]}" --shrink-only --out "$WORK/shrink"
code=$?
grep -q "The following argument was not expected: --shrink-only\|--shrink-only: " "$WORK/shrink.log" &&
  fail "08_fault_tolerance does not know --shrink-only yet: add it to the launcher (options.cpp), and have the launcher hand it to its lighthouse"
[ $code = 0 ] || fail "the run with --shrink-only failed (exit $code): $(grep -E 'error|FAILED' "$WORK/shrink.log" | head -n 3 | one_line)"
grep -q "^\[lighthouse\] quorum 1 ([^)]*): r0@0 r1@0 r2@0$" "$WORK/shrink.log" ||
  fail "with --shrink-only the first quorum must still be all three replicas (a lighthouse with no last quorum has nothing to shrink): $(grep -m 1 '^\[lighthouse\] quorum 1' "$WORK/shrink.log")"
grep -q "started r3, a replacement" "$WORK/shrink.log" || fail "the launcher did not start the replacement r3: $(tail -n 3 "$WORK/shrink.log" | one_line)"
if grep -E "^\[lighthouse\] quorum [0-9]+ .*: .*r3@" "$WORK/shrink.log" > /dev/null || grep -q "^\[replica r3\] quorum" "$WORK/shrink.log"; then
  fail "with --shrink-only r3 was let into a quorum: after the first quorum, only members of the last one may be candidates (quorum_compute in 08_fault_tolerance/quorum.cpp, as torchft's shrink_only)"
fi
grep -q "^\[replica r3\] the run ended at step 100 before this replica could join" "$WORK/shrink.log" ||
  fail "r3 should have asked, waited outside every quorum, and ended with the run: $(grep '^\[replica r3\]' "$WORK/shrink.log" | tail -n 2 | one_line)"
[ "$(grep -c '^\[launcher\] check: .*: OK$' "$WORK/shrink.log")" = 3 ] ||
  fail "the run's own checks did not all pass with --shrink-only: $(grep '^\[launcher\] check' "$WORK/shrink.log" | one_line)"
grep -q "^\[launcher\] 4 replicas ran, 1 lost, 0 failed" "$WORK/shrink.log" || fail "$(grep '^\[launcher\] .* replicas ran' "$WORK/shrink.log" | one_line)"
# The lighthouse itself, started by hand with the flag (not through the launcher), and three
# replicas. Once they have committed step 10, r2 is stopped (SIGSTOP) until the others have formed
# a quorum without it, then let go on (SIGCONT): it was in the first quorum, not in the last, so
# it must not come back; and r3, started then, must not come in. A rule other than "the last
# quorum's members" (the first quorum's, say) lets r2 back.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
hand=(--lighthouse "127.0.0.1:$port" --run shrink --out "$WORK/hand" --steps 100 --step-ms 40 --timeout 1)
run 90 "$WORK/lighthouse.log" 08_fault_tolerance --lighthouse-only --port "$port" --run shrink --expect 3 --shrink-only --serve-for 60 &
lighthouse=$!
sleep 1
pids=""
for r in r0 r1 r2; do
  run 90 "$WORK/$r.log" 08_fault_tolerance --replica-id $r "${hand[@]}" &
  pids+=" $!"
done
for _ in $(seq 1 600); do grep -q "^step 10 " "$WORK/hand/steps.r0.txt" 2>/dev/null && break; sleep 0.05; done
grep -q "^step 10 " "$WORK/hand/steps.r0.txt" 2>/dev/null ||
  fail "r0, r1 and r2 did not reach step 10 with a lighthouse started by hand: $(tail -n 2 "$WORK/r0.log" | one_line)"
r2=$(pgrep -f -- "^[^ ]*08_fault_tolerance --replica-id r2 --lighthouse 127.0.0.1:$port" | head -n 1)  # not its `timeout`
[ -n "$r2" ] || fail "r2 is not running: $(tail -n 2 "$WORK/r2.log" | one_line)"
kill -STOP "$r2"
for _ in $(seq 1 200); do grep -q "^\[lighthouse\] quorum 2 " "$WORK/lighthouse.log" && break; sleep 0.05; done
kill -CONT "$r2"
grep -q "^\[lighthouse\] quorum 2 ([^)]*): r0@[0-9]* r1@[0-9]*$" "$WORK/lighthouse.log" ||
  fail "with r2 stopped, r0 and r1 should have formed quorum 2 without it: $(grep '^\[lighthouse\] quorum' "$WORK/lighthouse.log" | one_line)"
run 90 "$WORK/r3.log" 08_fault_tolerance --replica-id r3 "${hand[@]}"
wait $pids
kill $lighthouse 2> /dev/null; wait $lighthouse 2> /dev/null
if grep -E "^\[lighthouse\] quorum ([2-9]|[1-9][0-9]+) .*(r2|r3)@" "$WORK/lighthouse.log" > /dev/null || grep -q "^step " "$WORK/hand/steps.r3.txt" 2>/dev/null; then
  fail "a lighthouse started by hand with --shrink-only let r2 back (stopped, then let go on) or r3 in (come while the others trained), into a quorum after the first: only members of the last quorum may be candidates"
fi
for r in r2 r3; do
  grep -q "^\[replica $r\] the run ended at step 100 before this replica could join" "$WORK/$r.log" ||
    fail "$r should have waited outside every quorum and ended with the run: $(tail -n 2 "$WORK/$r.log" | one_line)"
done
[ "$(grep '^step ' "$WORK/hand/steps.r0.txt" | tail -n 50 | grep -c ' contributors r0,r1 ')" = 50 ] ||
  fail "r0 and r1 did not train their last 50 steps together, the two of them alone"
# Without the flag: as before the exercise, r3 joins and heals.
run 120 "$WORK/grow.log" 08_fault_tolerance "${common[@]}" --out "$WORK/grow" ||
  fail "the run without --shrink-only failed: $(grep -E 'error|FAILED' "$WORK/grow.log" | head -n 3 | one_line)"
grep -q "^\[replica r3\] quorum [0-9]*: r0 r2 r3, rank 2 of 3, a new group; healing from r0" "$WORK/grow.log" ||
  fail "without --shrink-only r3 must join and heal as before: $(grep '^\[replica r3\]' "$WORK/grow.log" | head -n 2 | one_line)"
[ "$(grep -c '^\[launcher\] check: .*: OK$' "$WORK/grow.log")" = 3 ] || fail "the run without --shrink-only did not pass its own checks"
pass "with --shrink-only the replacement stayed out of every quorum after the first, and the run went on with the two survivors; without it, it joined and healed"
