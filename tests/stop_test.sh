#!/usr/bin/env bash
# Ctrl-C and SIGTERM on scripts/test.sh stop it and everything it started within 10 s (Note [Stop
# means stop], scripts/stop.sh): the real pipeline, interrupted while its two ctests (Note [Tests
# that wait, in a lane of their own]) each run a test.
#   tests/stop_test.sh BUILD_DIR    (build-cpu or build-cuda: the flavour it runs)
# Twice: SIGINT to the whole process group, as a terminal's Ctrl-C sends it; then SIGTERM to
# test.sh alone, as `kill` or a scheduler sends it. Each time: test.sh starts in a session of its
# own (setsid: its own process group), runs `-R` one long test (a CNN trained by 2 ranks) and one
# that waits, in its two lanes, and once the trainer's ranks and the waiting test's script are both
# up, every process under test.sh is listed and the signal
# sent; after 10 s none of the listed processes may remain, nor any process carrying the
# environment variable this test gave test.sh, and test.sh must have exited 130 or 143.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$1" && pwd)
flavour=${build##*/build-}
# A long test, of the long tier (DDP_LONG_TESTS=1, given below): interrupted while its trainer runs;
# and one labelled waits, which test.sh runs in a second ctest beside the first (Note [Tests that
# wait, in a lane of their own]): interrupted while it waits, so that the stop reaches both lanes.
target='^(TrainerLong\.CnnReaches88PercentTestAccuracyIn1EpochAt2Ranks|Setup\.WaitsForABusyAptAndStopsWithAptsOwnError)$'
tree() { local p; for p in $(pgrep -P "$1" 2>/dev/null); do echo "$p"; tree "$p"; done; }
fail=0
for how in INT TERM; do
  log=$(mktemp)
  # As a terminal starts it: SIGINT not ignored (a background job of this script would have it
  # ignored, and bash cannot trap a signal ignored when it starts).
  # Each process under it carries DDP_STOP_TEST (environments are inherited, the tests' too): one
  # that left the tree (re-parented to init) is found by it as well.
  mark="DDP_STOP_TEST=$$.$how"
  # Its logs and build times in a scratch folder: the ctest that runs this test has its own.
  logs=$(mktemp -d)
  env "$mark" DDP_LONG_TESTS=1 DDP_FLAVOURS=$flavour DDP_TEST_LOGS="$logs" DDP_TIMES_FILE="$logs/times.txt" setsid env --default-signal=INT "$root/scripts/test.sh" -R "$target" > "$log" 2>&1 &
  pid=$!
  up=no
  for _ in $(seq 240); do  # the setup's check and an up-to-date build first: up to 2 minutes
    kill -0 "$pid" 2>/dev/null || break
    running=$(tree "$pid" | xargs -r ps -o args= -p 2>/dev/null)
    if grep -q "05_ddp.*--model cnn" <<< "$running" && grep -q "setup_test.sh" <<< "$running"; then up=yes; break; fi
    sleep 0.5
  done
  if [ $up = no ]; then
    echo "FAIL ($how): the trainer of the long test and the waiting test's setup_test.sh never ran together under scripts/test.sh; its output:"; cat "$log"
    kill -KILL -- -"$pid" 2>/dev/null; fail=1; continue
  fi
  sleep 1
  listed=$(tree "$pid")
  running=$(xargs -r ps -o args= -p <<< "$listed" 2>/dev/null)  # read whole: no grep -q in a pipe under pipefail
  if ! grep -q "setup_test.sh" <<< "$running"; then
    echo "FAIL ($how): the waiting test ended before the signal could be sent: this run proves nothing of its lane; its output:"; cat "$log"
    kill -KILL -- -"$pid" 2>/dev/null; wait "$pid"; fail=1; continue
  fi
  echo "[stop_test] $how: scripts/test.sh (pid $pid) runs $(echo "$listed" | wc -w) processes, ctest's among them: $(echo "$listed" | xargs -r ps -o comm= -p | sort | uniq -c | tr -s ' \n' ' ')"
  if [ $how = INT ]; then kill -INT -- -"$pid"; else kill -TERM "$pid"; fi
  sent=$SECONDS
  for _ in $(seq 100); do
    left=$( (for p in $pid $listed; do kill -0 "$p" 2>/dev/null && echo "$p"; done
             grep -lsxzF "$mark" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3) | sort -u)
    [ -z "$left" ] && break
    sleep 0.1
  done
  wait "$pid"; rc=$?
  want=$([ $how = INT ] && echo 130 || echo 143)
  if [ -n "$left" ]; then
    echo "FAIL ($how): 10 s after the signal these still run:"; ps -o pid,ppid,args -p $(echo $left | tr ' ' ',')
    echo "scripts/test.sh's last lines:"; tail -n 5 "$log"
    kill -KILL $left 2>/dev/null; fail=1
  elif [ $rc != "$want" ]; then
    echo "FAIL ($how): scripts/test.sh exited $rc, not $want; its output:"; tail -n 20 "$log"; fail=1
  else
    echo "[stop_test] $how: everything ended within $((SECONDS - sent)) s, scripts/test.sh exited $rc; its last lines:"
    tail -n 3 "$log" | sed 's/^/    /'
  fi
  rm -rf "$log" "$logs"
done
[ $fail = 0 ] && echo "PASS: Ctrl-C and SIGTERM stop scripts/test.sh and all it started"
exit $fail
