# stop.sh (sourced): Ctrl-C or SIGTERM ends the script that sources it and everything it started.
#
# Note [Stop means stop]
# ~~~~~~~~~~~~~~~~~~~~~~
# Ctrl-C sends SIGINT to the terminal's foreground process group. But a non-interactive bash
# starts its background commands (`cmd &`, as run_step starts ctest and the builds) with SIGINT
# ignored, and what they start inherits that: the script ended on Ctrl-C while ctest, a child of
# init now, went on starting test after test. So the script catches INT and TERM itself: it lists
# every process it started (its descendants, and every process carrying its mark, DDP_STOP_MARK
# below: a stopped parent's children are re-parented out of the tree), sends them SIGTERM, gives
# them 5 s, sends SIGKILL to what is left, runs its own cleanup (its EXIT trap: the local Slurm,
# the wheel's install) and
# exits 130 (SIGINT) or 143 (SIGTERM), as a shell reports them. What a test started apart (the
# reference server, in its own session) ends with ctest by itself (tests/reference_server.py).
# A trap runs only between commands, so a script sourcing this runs its long steps in the
# background and waits (run_step, `wait`): test.sh, run.sh and exercise.sh do. The bench scripts
# run their measurements in the foreground: Ctrl-C reaches the measurement too and the stop is
# at once, but a SIGTERM sent to the script alone waits for the measurement running to end.

# Every process this script starts carries this run's mark in its environment, also one that
# left the tree (its parent ended first: ctest, stopped by the same Ctrl-C, leaves the trainers of
# a test to init) or started a session of its own. A script run under another gets its own mark.
export DDP_STOP_MARK="$$.${EPOCHSECONDS:-$(date +%s)}.$RANDOM"

stop_tree() {  # the descendants of $1, parents first; not the subshell listing them ($BASHPID)
  local p
  for p in $(pgrep -P "$1" 2>/dev/null); do
    [ "$p" != "$BASHPID" ] || continue
    echo "$p"
    stop_tree "$p"
  done
}

stop_marked() {  # every process with this run's mark but this script (and the lister, gone by then)
  { grep -lsxzF "DDP_STOP_MARK=$DDP_STOP_MARK" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3 | grep -vx "$$"; } || true
}

stop_everything() {
  local code=$1 name=$2 pids="" more left p i
  trap - INT TERM
  set +e  # nothing here may end the script early: a process gone meanwhile is no error
  echo "[stop] $name: stopping what $(basename "$0") started" >&2
  for i in 1 2; do  # twice: a process may have started one more while the first round was sent
    more="$(stop_tree $$) $(stop_marked)"
    pids="$pids $more"
    kill -TERM $more 2>/dev/null || true
  done
  for i in $(seq 50); do  # up to 5 s
    left=""
    for p in $pids; do kill -0 "$p" 2>/dev/null && left="$left $p"; done
    [ -n "$left" ] || break
    sleep 0.1
  done
  left="$left $(stop_tree $$) $(stop_marked)"
  [ -z "${left// /}" ] || kill -KILL $left 2>/dev/null || true
  exit "$code"
}

trap 'stop_everything 130 SIGINT' INT
trap 'stop_everything 143 SIGTERM' TERM
