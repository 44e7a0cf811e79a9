#!/usr/bin/env bash
# Sets up, builds (CPU/Gloo) and runs the course (01-08), each chapter at world size 2 (08: three replicas), in order:
# chapter 01 runs as soon as it is built, while the later chapters build in the background, each
# one run once it is built (the chapters themselves: scripts/course.sh). Ctrl-C or SIGTERM stops
# it and everything it started (Note [Stop means stop], stop.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/stop.sh"
source "$root/scripts/progress.sh"
source "$root/scripts/course.sh"
source "$root/scripts/results.sh"
"$root/scripts/setup.sh" cpu &  # in the background, as every long step: a stop is not held until it ends
wait $!
build=$root/build-cpu
log=$root/build-cpu.log
failed() { tail -n 60 "$log"; echo "build FAILED (full log: $log)" >&2; exit 1; }

# 1. Chapter 01 and the libraries it links, in the foreground (this also configures).
usual="building chapter 01: $(result_estimate first_run "minutes" chapter01_build_s) the first time, seconds when built"
[ -f "$build/Makefile" ] && usual="building what changed for chapter 01"
run_step "[build cpu]" "$usual" "$log" "$BUILD_FILTER" "$root/scripts/build.sh" cpu 01_join_group || failed

# 2. The later chapters, one after the other, then the programs besides them that pages run
#    (course_tools), at the lowest priority (nice 19), so that they
#    take only what the running chapter leaves. Their lines go to the log only; each one's
#    "<chapter> <exit status>" to a status file. In a session of its own, so that it can be
#    stopped with everything it started when this script ends early.
status=$build/run-sh-builds.txt
: > "$status"
later=("${course_chapters[@]:1}" "${course_tools[@]}")
echo "[build cpu] ${later[*]}: building in the background meanwhile (nice 19; log: $log)"
echo "[build cpu] while it compiles, the chapters below share the cores with it: their times, samples/s and overlap shares are then a busy machine's"
setsid nice -n 19 bash -c 'build=$1 log=$2 status=$3; shift 3
  for t in "$@"; do
    rc=0; cmake --build "$build" -j2 --target "$t" >> "$log" 2>&1 || rc=$?
    echo "$t $rc" >> "$status"
    [ $rc = 0 ] || exit $rc
  done' _ "$build" "$log" "$status" "${later[@]}" &
builder=$!
trap 'kill -- -$builder 2>/dev/null || true' EXIT

# Waits until the background build of one chapter ended: quiet when it is already built,
# else its progress lines while waiting. A failed build stops here, after the chapters before.
built() {
  local t=$1 start=$SECONDS i
  for i in 1 2 3; do grep -q "^$t " "$status" && break; sleep 1; done  # built: quiet
  if ! grep -q "^$t " "$status"; then
    echo "[build cpu] waiting for $t to build"
    follow_log "[build cpu]" "$log" "$(wc -l < "$log")" "$BUILD_FILTER" \
      bash -c '! grep -q "^$1 " "$2" && kill -0 "$3"' _ "$t" "$status" "$builder"
    grep -q "^$t " "$status" || { echo "the background build stopped before $t" >&2; failed; }
    echo "[build cpu] $t built after $((SECONDS - start)) s of waiting"
  fi
  grep -q "^$t 0$" "$status" || failed
}

for chapter in "${course_chapters[@]}"; do
  [ "$chapter" = 01_join_group ] || built "$chapter"
  "chapter_$chapter" "$build" &  # waited for in the background: a stop is not held until it ends
  wait $!
done
for t in "${course_tools[@]}"; do built "$t"; done  # what the pages run besides the chapters
wait "$builder"
echo "(the build's full log: $log)"
course_done
