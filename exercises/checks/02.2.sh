#!/usr/bin/env bash
# exercise: 02.2 Restart only what a restart can mend
# kind: coding
# time: 25 min
# build: 02_spawn
# proves: with --max-restarts 2, workers that exit 2 (a usage error: they will fail the same way
#         every time) are started once, not three times, and the launcher says why; a worker that
#         fails otherwise (exit 1 or 3, or killed) is still restarted, so restarts still work.
source "$(dirname "$0")/lib.sh"
run 90 "$WORK/usage.log" 02_spawn --nproc-per-node 2 --max-restarts 2 -- "$B/01_join_group" --no-such-flag
code=$?
starts=$(grep -c '^\[launcher\] starting 2 workers' "$WORK/usage.log")
[ "$code" = 2 ] || fail "02_spawn exited $code for workers that exit 2; it should pass their exit code 2 on"
[ "$starts" = 1 ] || fail "02_spawn started the workers $starts times, but a usage error (exit 2) fails the same way every time: stop restarting in run_with_restarts (02_spawn/restarts.cpp)"
grep -q 'not restarting' "$WORK/usage.log" || fail "02_spawn stopped without saying why: log a line with 'not restarting' and the reason"
grep 'not restarting' "$WORK/usage.log" | grep -qiE 'exit( code)? 2|usage' ||
  fail "the 'not restarting' line gives no reason: say that exit 2 is a usage error, which a restart cannot mend"
run 90 "$WORK/exit3.log" 02_spawn --nproc-per-node 2 --max-restarts 1 --fail-rank 1
starts=$(grep -c '^\[launcher\] starting 2 workers' "$WORK/exit3.log")
[ "$starts" = 2 ] || fail "a worker that exits 3 must still be restarted: 02_spawn --max-restarts 1 --fail-rank 1 started the workers $starts time(s), not 2"
# Killed (exit 137: a crash, the OOM killer): a restart may well mend it.
run 90 "$WORK/kill.log" 02_spawn --nproc-per-node 2 --max-restarts 1 --fail-rank 1 --fail-mode kill
starts=$(grep -c '^\[launcher\] starting 2 workers' "$WORK/kill.log")
[ "$starts" = 2 ] || fail "a worker that is killed must still be restarted: 02_spawn --max-restarts 1 --fail-rank 1 --fail-mode kill started the workers $starts time(s), not 2"
# Exit 1 (a timeout, a peer gone: the commonest failure) is no usage error either.
run 90 "$WORK/exit1.log" 02_spawn --nproc-per-node 2 --max-restarts 1 -- /bin/false
starts=$(grep -c '^\[launcher\] starting 2 workers' "$WORK/exit1.log")
[ "$starts" = 2 ] || fail "workers that exit 1 (a timeout, a peer gone) must still be restarted: 02_spawn --max-restarts 1 -- /bin/false started them $starts time(s), not 2"
pass "a usage error is not restarted ($(grep -o 'not restarting.*' "$WORK/usage.log" | head -n 1)); exit 1, exit 3 and a kill still are"
