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

# make's lines, one per translation unit and link, as progress lines; compiler errors and make's
# "***" lines as they come (a file named error_file.cpp is not an error).
BUILD_FILTER='s/^\[ *([0-9]+)%\] Building CXX object .*cmake_pch\.hxx\.(gch|pch)$/[\1%] precompiling <torch\/torch.h>/p
s/^\[ *([0-9]+)%\] Building CXX object (.*\/)?([^ \/]+)\.dir\/Unity\/unity_([0-9]+)_cxx\.cxx\.o$/[\1%] compiling \3'"'"'s files together (part \4)/p
s/^\[ *([0-9]+)%\] Building CXX object (CMakeFiles\/)?([^ ]*\.dir\/)?(.*)\.o$/[\1%] compiling \4/p
s/^\[ *([0-9]+)%\] Linking CXX (executable|static library) (.*)$/[\1%] linking \3/p
s/^\[ *([0-9]+)%\] Building CUDA object (.*)$/[\1%] compiling \2/p
/: (fatal )?error: |\*\*\* /p'
