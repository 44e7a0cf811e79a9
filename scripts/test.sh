#!/usr/bin/env bash
# Sets up, builds and runs every test (ctest), for each LibTorch flavour:
#   cpu  = Debian libtorch-dev 1.13 (Gloo)      -> build-cpu/
#   cuda = PyPI torch 2.11.0 (CUDA 13, NCCL)    -> build-cuda/  (GPU tests skip without a GPU;
#          needs the CUDA 13.0 toolkit in $DDP_CUDA_HOME, default /usr/local/cuda)
# The second flavour builds (nice 19) while the first one's tests run.
# Usage: scripts/test.sh [--plan | -R REGEX]
#   Without DDP_FLAVOURS: the flavours this machine can build (cpu always, cuda with the toolkit),
#   saying which one it skipped and why. DDP_FLAVOURS="cpu cuda" (CI), cpu or cuda: exactly those;
#   one that cannot be built here stops it at once, exit 2. --plan: say what it would set up,
#   build and test, and exit. -R REGEX: only the tests whose names match (ctest -R).
# Ctrl-C or SIGTERM stops it and every test it started (Note [Stop means stop], stop.sh).
# DDP_TEST_LOGS=DIR: its logs (build-<flavour>.log, ctest-<flavour>.log, build times) there instead
# of beside the builds; the stop test sets it, so that a test.sh it runs inside a running one
# leaves the outer run's logs alone.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
logs_apart=${DDP_TEST_LOGS:-}  # empty: each log beside its build
logdir=${logs_apart:-$root}
stamp() { if [ -n "$logs_apart" ]; then echo "$logs_apart/build-time-$1.txt"; else echo "$root/build-$1/build-time.txt"; fi; }
plan=no filter=""
case "$#:${1:-}" in
  0:) ;;
  1:--plan) plan=yes ;;
  2:-R) filter=$2 ;;
esac
if [ $# -gt 0 ] && [ $plan = no ] && [ -z "$filter" ]; then
  echo "[test] error: unknown arguments '$*' (usage: scripts/test.sh [--plan | -R REGEX]; flavours: DDP_FLAVOURS)" >&2
  exit 2
fi
source "$root/scripts/flavours.sh"
resolve_flavours "[test]" ${DDP_FLAVOURS:-}
# Said at the start and again in the summary: "the cuda flavour: no CUDA toolkit in ...".
skip_what=""
[ -z "$skipped" ] || skip_what="the ${skipped%%:*} flavour: ${skipped#*: }"
[ -z "$skip_what" ] || echo "[test] skipping $skip_what"
echo "[test] flavours: $flavours$([ -n "${DDP_FLAVOURS:-}" ] && echo " (DDP_FLAVOURS)" || echo " (what this machine can build)")"
if [ $plan = yes ]; then
  for f in $flavours; do
    echo "[test] plan: set up $f, build build-$f/, run its tests (ctest)"
  done
  # The paths the cpu flavour depends on, for this machine's architecture (flavours.sh).
  echo "[test] plan: the cpu flavour's LibTorch from $(cpu_torch_prefix), its BLAS $(openblas_library libblas.so.3)"
  exit 0
fi

source "$root/scripts/stop.sh"
source "$root/scripts/progress.sh"
source "$root/scripts/timings.sh"
# DDP_RECORD_RESULTS=1: this run's phases into results/test_phases.json at the end; not handed to
# the tests, whose scripts would otherwise rewrite the result files the pages cite.
record_results=${DDP_RECORD_RESULTS:-}
unset DDP_RECORD_RESULTS
# Whatever this script started, stopped when it ends: the wheel's install (if the cpu build
# failed before it ended) with the pip it runs, and the throw-away Slurm below.
descendants() { local p; for p in $(pgrep -P "$1"); do echo "$p"; descendants "$p"; done; }
wheel="" wheel_time="" wheel_status="" slurm_up=no next_status="" side="" side_status=""
cleanup() {
  # The wheel's pid is its own only while it runs (Note [A job's status in a file], progress.sh).
  [ -z "$wheel" ] || [ -s "$wheel_status" ] || kill $(descendants "$wheel") "$wheel" 2>/dev/null || true
  # The lane of waiting tests, when the script ends before waiting for it (an early exit).
  [ -z "$side" ] || [ -s "$side_status" ] || kill $(descendants "$side") "$side" 2>/dev/null || true
  rm -f "$wheel_time" "$wheel_status" "$next_status" "$side_status"
  [ "$slurm_up" = no ] || "$root/scripts/local_slurm.sh" down >/dev/null 2>&1 || true
}
trap cleanup EXIT
# Note [The wheel beside the cpu build]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Installing torch's 4.6 GB wheel into the virtualenv takes a minute or more of one core, mostly
# unpacking, and only the cuda build needs it. So setup.sh makes everything else first (Debian's
# packages, the virtualenv with TensorBoard's reader, which the cpu build's configure looks for),
# and a second call installs the wheel while the cpu build compiles; the cuda build waits for it.
start=$SECONDS
if [[ " $flavours " == *" cuda "* ]]; then
  DDP_SETUP_TORCH=later "$root/scripts/setup.sh" $flavours
  phase_done setup $((SECONDS - start))
  wheel_time=$(mktemp) wheel_status=$(mktemp)  # its own seconds, for the summary; how it ended
  install_wheel() { local begun=$SECONDS; DDP_SETUP_LOG=$root/setup-torch.log "$root/scripts/setup.sh" cuda && echo $((SECONDS - begun)) > "$wheel_time"; }
  start_job "$wheel_status" install_wheel
  wheel=$!
else
  "$root/scripts/setup.sh" $flavours
  phase_done setup $((SECONDS - start))
fi
status=0
# A throw-away Slurm for chapter 06's tests (label slurm), stopped again when this script ends.
# Without root or namespaces they skip, and say why.
# With -R, only when the tests asked for are Slurm's: another run's Slurm is left alone.
if [[ " $flavours " == *" cpu "* ]] && { [ -z "$filter" ] || [[ ${filter,,} == *slurm* ]]; }; then
  if why=$("$root/scripts/local_slurm.sh" up 2>&1); then
    echo "$why"
    eval "$("$root/scripts/local_slurm.sh" env)"
    slurm_up=yes
  else
    echo "$why"
    export DDP_SLURM_UNAVAILABLE="${why//$'\n'/ }"
  fi
fi
# The first time, each phase's estimate is what a full run took where results/test_phases.json
# was recorded (DDP_RECORD_RESULTS=1 scripts/test.sh from a fresh clone); after that, what it
# took here the last time (timings.sh).
source "$root/scripts/results.sh"
declare -A first_build first_test
for f in cpu cuda; do
  first_build[$f]=$(result_estimate test_phases "a few minutes" seconds "build-$f-first")
  first_test[$f]=$(result_estimate test_phases "many minutes" seconds "test-$f")
done
# Builds one flavour (at the priority given: "nice -n 19" or none), names its LibTorch, and
# leaves its time for built(): a first build and one of what changed are kept apart.
build_flavour() {
  local f=$1 log=$logdir/build-$1.log usual key=build-$1-first start=$SECONDS
  shift
  usual="building everything: $(phase_estimate "$key" "${first_build[$f]}")"
  if [ -f "$root/build-$f/Makefile" ]; then
    key=build-$f
    usual="building what changed"
    [ -z "$(phase_last "$key")" ] || usual="building what changed: $(phase_estimate "$key" "")"
  fi
  if ! run_step "[build $f]" "$usual" "$log" "$BUILD_FILTER" "$@" "$root/scripts/build.sh" "$f"; then
    tail -n 60 "$log"
    echo "== [$f] build FAILED (full log: $log)"
    return 1
  fi
  echo "$key $((SECONDS - start))" > "$(stamp "$f")"  # for built(), in the main shell
  grep -E "^-- (LibTorch|Compiler|Gloo|CUDA|NCCL|BLAS|Linker|torchrun|Python reference|TensorBoard|Slurm)|BLAS:" "$log" | sed "s|^|[build $f] |" || true
}
built() { local k t; read -r k t < "$(stamp "$1")" && phase_done "$k" "$t"; }
# ctest_in <flavour> [ctest arguments...]: ctest in that flavour's build. (Callers add test.sh's
# -R: run_step, which runs it, has a local of its own named filter.)
ctest_in() { local f=$1; shift; (cd "$root/build-$f" && ctest --output-on-failure --timeout 300 "$@"); }
# count_tests <flavour> <label>: how many tests of that flavour's build (-R with test.sh's) carry that label.
count_tests() { (cd "$root/build-$1" && ctest -N -L "^$2\$" ${filter:+-R "$filter"} | sed -n 's/^Total Tests: *//p'); }
# run_ctest <flavour> <what it runs> <log> [ctest arguments...]: ctest_in with test.sh's -R, a
# line per test as it ends; a failure is remembered in status.
run_ctest() {
  local f=$1 what=$2 log=$3
  shift 3
  run_step "[test $f]" "$what" "$log" p ctest_in "$f" ${filter:+-R "$filter"} "$@" || status=1
}
read -r -a fl <<< "$flavours"
logs=()
build_flavour "${fl[0]}" || exit 1
built "${fl[0]}"
if [ -n "$wheel" ]; then
  start=$SECONDS waited=no
  [ -s "$wheel_status" ] || { waited=yes; echo "[build cuda] waits for torch's wheel, still being installed (setup)"; }
  if ! job_status "$wheel_status" "$wheel"; then
    wheel=""
    echo "== setup of the cuda flavour FAILED (above; log: $root/setup-torch.log)"
    exit 2
  fi
  wheel=""
  phase_done setup-wheel "$(cat "$wheel_time")"
  rm -f "$wheel_time"
  [ $waited = no ] || phase_done wait-wheel $((SECONDS - start))
fi
for i in "${!fl[@]}"; do
  f=${fl[$i]}
  next=${fl[$((i + 1))]:-}
  # The next flavour builds meanwhile at the lowest priority (nice 19), on the cores the tests
  # leave idle (they wait on processes, timeouts and Slurm), so it cannot slow them.
  if [ -n "$next" ]; then
    # Its status in a file, not only in bash's memory (Note [A job's status in a file], progress.sh).
    next_status=$(mktemp)
    start_job "$next_status" build_flavour "$next" nice -n 19
    next_build=$!
  fi
  # Every line of ctest's as it comes (one per test), and a word when none came for 30 s.
  tlog=$root/build-$f/ctest.log
  [ -z "$logs_apart" ] || tlog=$logs_apart/ctest-$f.log
  # Note [Measured alone]
  # ~~~~~~~~~~~~~~~~~~~~~
  # The tests labelled measures (05.10's, the cost model's) time this machine, and 05.10's
  # compares two measurements made a minute apart, so both must see the same machine: RUN_SERIAL
  # keeps other tests off it, but not the next flavour's build, which at nice 19 still took the
  # cores whenever a test waited (in CI, 05.10's solution measured alpha at 1233.4 us beside it,
  # against 301.9 us alone here, and failed its own check; the cost model's fit an alpha five
  # times its own). So while a build runs beside, they wait, and run once it has ended (and the
  # lane of waiting tests below: its Slurm jobs train too).
  #
  # Note [Tests that wait, in a lane of their own]
  # ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
  # ctest -j2 keeps two tests running, whether they compute or wait. The real-Slurm tests mostly
  # wait (their jobs wait out time limits of a minute, and the scheduler), so each held one of the
  # two places for minutes while a core idled. The tests labelled waits (tests/CMakeLists.txt) run
  # in a second ctest beside the first, one at a time, and the first keeps both places for the
  # tests that compute. A waiting test is one that keeps the machine busy a small part of its
  # time, measured alone; a test that bounds how long a rank takes to start (the timeout tests of
  # chapters 01 and 02) stays in the first lane, since a third test beside two that compute slows
  # starts; so does one that shares a RESOURCE_LOCK with tests of the first lane (the Slurm test on
  # shaped links), as a lock holds only within one ctest. The tests that measure the machine then
  # wait for both lanes (Note [Measured alone]), as RUN_SERIAL keeps only the tests of its own
  # ctest off it. Both lanes are one build's ctests: `ctest --rerun-failed` there knows only the
  # failures of the lane that ended last (each lane's log names its own).
  later=() side="" side_status=""
  rm -f "${tlog%.log}-waits.log"  # an earlier run's, which the summary would read as this one's
  nwaits=$(count_tests "$f" waits)
  if [ "${nwaits:-0}" -gt 0 ]; then
    # run_step, not run_ctest: the lane's status must reach its file, not a subshell's status.
    side_status=$(mktemp)
    start_job "$side_status" run_step "[test $f waits]" "the $nwaits tests that mostly wait, beside the others, one at a time" \
      "${tlog%.log}-waits.log" p ctest_in "$f" ${filter:+-R "$filter"} -L '^waits$'
    side=$!
  fi
  apart=""
  [ -z "$next" ] || apart="those that measure this machine"
  [ -z "$side" ] || apart="${apart:+$apart and }those that mostly wait"
  [ -z "$apart" ] || later=(-LE '^(measures|waits)$')
  start=$SECONDS
  run_ctest "$f" "running every test${apart:+ but $apart}: $(phase_estimate "test-$f" "${first_test[$f]}")" \
    "$tlog" -j2 "${later[@]}"
  phase_done "test-$f" $((SECONDS - start))
  logs+=("$logdir/build-$f.log" "$tlog")
  if [ -n "$side" ]; then
    start=$SECONDS
    job_status "$side_status" "$side" || status=1
    rm -f "$side_status"
    side="" side_status=""
    phase_done "wait-$f-waits" $((SECONDS - start))
    logs+=("${tlog%.log}-waits.log")
  fi
  if [ -n "$next" ] && [ ! -s "$next_status" ]; then  # still building: its pid is still its own
    # Alone now: back to the normal priority, so that other work on the machine cannot starve
    # it (as root; elsewhere it stays at 19). Compilers make starts later inherit it.
    echo "[test $next] the $next tests wait for the $next build: it ran at nice 19 beside the $f tests, and has the cores now"
    renice -n 0 -p $(descendants "$next_build") > /dev/null 2>&1 || true
  fi
  if [ -n "$next" ]; then
    start=$SECONDS
    if ! job_status "$next_status" "$next_build"; then
      echo "== logs: ${logs[*]}"
      exit 1
    fi
    built "$next"
    phase_done "wait-$next" $((SECONDS - start))
  fi
  nmeasures=$(count_tests "$f" measures)
  if { [ -n "$next" ] || [ -n "$side" ]; } && [ "${nmeasures:-0}" -gt 0 ]; then
    start=$SECONDS
    run_ctest "$f" "the tests that measure this machine, now that nothing runs beside them: $(phase_estimate "test-$f-measures" "a minute or two")" \
      "${tlog%.log}-measures.log" -L measures
    phase_done "test-$f-measures" $((SECONDS - start))
    logs+=("${tlog%.log}-measures.log")
  fi
done
echo "== logs: ${logs[*]}"
time_summary
# The figures the first run's estimates come from (above), kept only when asked and all passed.
if [ "$record_results" = 1 ] && [ $status = 0 ] && [ -z "$filter" ]; then
  members=""
  for k in "${phase_keys[@]}"; do members+="${members:+, }\"$k\": ${phase_secs[$k]}"; done
  DDP_RECORD_RESULTS=1 write_result test_phases "scripts/test.sh (DDP_RECORD_RESULTS=1 DDP_FLAVOURS=\"$flavours\")" \
    "\"seconds\": {$members}, \"total\": $((SECONDS - run_start))"
fi
echo "== flavours tested: $flavours: $([ $status = 0 ] && echo "every test passed" || echo "some tests FAILED (above)")"
[ -z "$skip_what" ] || echo "== skipped $skip_what"
exit $status
