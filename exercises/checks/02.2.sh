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
# restarted <log name> <who> <02_spawn arguments...>: FAILs unless a failure of those arguments
# starts the workers again, once (--max-restarts 1).
restarted() {
  local name=$1 who=$2 starts
  shift 2
  run 90 "$WORK/$name.log" 02_spawn --nproc-per-node 2 --max-restarts 1 "$@"
  starts=$(grep -c '^\[launcher\] starting 2 workers' "$WORK/$name.log")
  [ "$starts" = 2 ] || fail "$who must still be restarted: 02_spawn --max-restarts 1 $* started the workers $starts time(s), not 2"
}
restarted exit3 "a worker that exits 3" --fail-rank 1
# Killed (exit 137: a crash, the OOM killer): a restart may well mend it.
restarted kill "a worker that is killed" --fail-rank 1 --fail-mode kill
# Exit 1 (a timeout, a peer gone: the commonest failure) is no usage error either.
restarted exit1 "workers that exit 1 (a timeout, a peer gone)" -- /bin/false
pass "a usage error is not restarted ($(grep -o 'not restarting.*' "$WORK/usage.log" | head -n 1)); exit 1, exit 3 and a kill still are"
