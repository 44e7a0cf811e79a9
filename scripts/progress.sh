# Sourced by setup.sh, run.sh and test.sh: runs a long step with its whole output in a log file
# and says what it is doing meanwhile, so that a first run never looks hung.
#
#   run_step LABEL USUAL LOG FILTER CMD...
#     LABEL   starts every line printed ("[build cpu]")
#     USUAL   how long the step usually takes here, said once at the start
#     LOG     the file that gets everything the command prints
#     FILTER  a sed -E script run with -n over each new log line: what it prints is shown
#             ("p" shows every line, "" none)
#   Every 30 s without a shown line it says that the step is still running, and for how long.
#   Returns the command's exit status; the caller names the log on failure.
run_step() {
  local label=$1 usual=$2 log=$3 filter=$4
  shift 4
  echo "$label $usual (log: $log)"
  : > "$log"
  "$@" >> "$log" 2>&1 &
  local pid=$! start=$SECONDS rc=0
  follow_log "$label" "$log" 0 "$filter" kill -0 "$pid"
  wait "$pid" || rc=$?
  echo "$label done in $((SECONDS - start)) s$([ $rc = 0 ] || echo ", FAILED (exit $rc)")"
  return $rc
}

#   follow_log LABEL LOG SEEN FILTER CMD...
#     Shows LOG's lines after its first SEEN, through FILTER, for as long as CMD succeeds (run
#     once a second), and once more after, for the last lines; "... still running" as above.
follow_log() {
  local label=$1 log=$2 seen=$3 filter=$4
  shift 4
  local start=$SECONDS shown=$SECONDS running=1 lines new
  while [ $running = 1 ]; do
    "$@" 2>/dev/null || running=0  # one more pass after the end, for the last lines
    lines=$(wc -l < "$log")
    if [ "$lines" -gt "$seen" ]; then
      new=$(sed -n "$((seen + 1)),${lines}p" "$log" | sed -nE "$filter")
      seen=$lines
      if [ -n "$new" ]; then
        printf '%s\n' "$new" | sed "s|^|$label |"
        shown=$SECONDS
      fi
    fi
    if [ $running = 1 ] && [ $((SECONDS - shown)) -ge 30 ]; then
      echo "$label ... still running, $((SECONDS - start)) s so far"
      shown=$SECONDS
    fi
    [ $running = 1 ] && sleep 1
  done
  return 0
}

# Note [A job's status in a file]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# `wait PID` can lose a background job that ended long before: pid numbers wrap (at 32768 by
# default, and the tests start tens of thousands of processes), and once a later child of the
# shell is given the same number, bash forgets the status it kept for the first ("wait: pid N is
# not a child of this shell": a fresh-clone run of test.sh whose cuda build ended minutes before
# the cpu tests did; every test passed, and it exited 1), or answers with the later child's (here:
# a job that exited 3, then 32448 children later, `wait` on its pid said 0). So a job started with
# start_job writes its exit status to a file as it ends: the file says whether it is still running
# (empty) and how it ended, and wait only reaps it.
#   start_job FILE CMD...   CMD in the background ($! is its pid); its exit status into FILE as it ends
#   job_status FILE PID     waits for it, then returns the status FILE holds
start_job() {
  local file=$1
  shift
  ( rc=0; "$@" || rc=$?; echo "$rc" > "$file.tmp" && mv "$file.tmp" "$file" ) &
}
job_status() {
  local rc=0
  wait "$2" 2>/dev/null || rc=$?
  [ ! -s "$1" ] || rc=$(cat "$1")
  return "$rc"
}

# make's lines, one per translation unit and link, as progress lines; compiler errors and make's
# "***" lines as they come (a file named error_file.cpp is not an error).
BUILD_FILTER='s/^\[ *([0-9]+)%\] Building CXX object .*cmake_pch\.hxx\.(gch|pch)$/[\1%] precompiling <torch\/torch.h>/p
s/^\[ *([0-9]+)%\] Building CXX object (.*\/)?([^ \/]+)\.dir\/Unity\/unity_([0-9]+)_cxx\.cxx\.o$/[\1%] compiling \3'"'"'s files together (part \4)/p
s/^\[ *([0-9]+)%\] Building CXX object (CMakeFiles\/)?([^ ]*\.dir\/)?(.*)\.o$/[\1%] compiling \4/p
s/^\[ *([0-9]+)%\] Linking CXX (executable|static library) (.*)$/[\1%] linking \3/p
s/^\[ *([0-9]+)%\] Building CUDA object (.*)$/[\1%] compiling \2/p
/: (fatal )?error: |\*\*\* /p'
