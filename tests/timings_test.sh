#!/usr/bin/env bash
# scripts/timings.sh, what scripts/test.sh says of time: each phase's estimate from the last run's
# times (the first run's from its fallback), a full build and a build of what changed kept apart,
# and the summary naming every phase with the last run's time beside it and each flavour's
# slowest tests, read from ctest logs of the form ctest writes. Seconds; nothing built.
# Usage: tests/timings_test.sh [repository root]
set -uo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
scratch=$(mktemp -d /tmp/ddp-timings-test.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
failures=0
fail() { echo "FAILED: $*"; failures=$((failures + 1)); }
same() { [ "$2" = "$3" ] || fail "$1: got '$2', expected '$3'"; }
holds() { grep -qF -- "$3" <<< "$2" || fail "$1: '$3' missing from: $2"; }

# A ctest log: result lines among the Start lines and a failed test's output.
mkdir -p "$scratch/build-cpu" "$scratch/build-cuda"
cat > "$scratch/build-cpu/ctest.log" <<'EOF'
        Start 262: ReadmeWalk.EveryCommandInReadingOrder
  1/4 Test  #12: Join.FileStoreInit .....................   Passed    0.91 sec
  2/4 Test #116: CostModel.OneAgainstTwoRanksMeasuredAndPredicted ....***Failed   17.49 sec
[ RUN      ] CostModel.OneAgainstTwoRanksMeasuredAndPredicted
  3/4 Test #119: Gpu.EveryChapterPassesItsSelfCheckOnNccl ..........***Skipped   0.00 sec
  4/4 Test #262: ReadmeWalk.EveryCommandInReadingOrder ..............   Passed  418.72 sec
EOF
cat > "$scratch/build-cuda/ctest.log" <<'EOF'
  1/1 Test  #60: Trainer/TrainerMatchesPyTorchDDP.FinalParameters/Cnn ...   Passed   11.50 sec
EOF
# The cpu flavour's lane of waiting tests (Note [Tests that wait, in a lane of their own]); the
# cuda flavour has none.
cat > "$scratch/build-cpu/ctest-waits.log" <<'EOF'
  1/1 Test #286: Slurm.AJobThatHitsItsTimeLimitWithoutTheSignalIsReportedInSlurmsOwnState ...   Passed   80.46 sec
EOF

# Each run in a subshell under set -e, as scripts/test.sh sources them: a helper that returns
# non-zero (a file not there yet) would stop it.
(
  set -e
  export DDP_TIMES_FILE=$scratch/times.txt
  source "$root/scripts/timings.sh"
  same "first run, no times kept" "$(phase_estimate test-cpu "the fallback")" "the fallback"
  same "slowest, in order" "$(slowest_tests "$scratch/build-cpu/ctest.log" 2 | paste -sd '|')" \
    "ReadmeWalk.EveryCommandInReadingOrder 419 s|CostModel.OneAgainstTwoRanksMeasuredAndPredicted 17 s"
  phase_done build-cpu-first 353
  phase_done test-cpu 1119
  same "kept for the next run" "$(phase_estimate test-cpu "the fallback")" "about 18 min 39 s (the last run here)"
  same "a full build is not a build of what changed" "$(phase_estimate build-cpu "none kept")" "none kept"
  exit $failures
)
[ $? = 0 ] || fail "the first run stopped or failed (above)"

# The next run reads the first one's times and says both in its summary.
(
  set -e
  export DDP_TIMES_FILE=$scratch/times.txt
  source "$root/scripts/timings.sh"
  root=$scratch flavours="cpu cuda"  # time_summary reads $root/build-<flavour>/ctest.log
  phase_done test-cpu 900
  phase_done test-cuda 300
  # Not in $(...), where set -e does not reach: test.sh calls it as a command of its own.
  time_summary > "$scratch/summary.txt"
  out=$(cat "$scratch/summary.txt")
  echo "$out"
  holds "phases" "$out" "== phases: test-cpu 15 min 0 s (last run 18 min 39 s), test-cuda 5 min 0 s;"
  holds "slowest cpu, both lanes" "$out" "== slowest cpu tests: ReadmeWalk.EveryCommandInReadingOrder 419 s, Slurm.AJobThatHitsItsTimeLimitWithoutTheSignalIsReportedInSlurmsOwnState 80 s, CostModel.OneAgainstTwoRanksMeasuredAndPredicted 17 s, Join.FileStoreInit 1 s, Gpu.EveryChapterPassesItsSelfCheckOnNccl 0 s"
  holds "slowest cuda" "$out" "== slowest cuda tests: Trainer/TrainerMatchesPyTorchDDP.FinalParameters/Cnn 12 s"
  same "one line a phase in the file" "$(sort "$scratch/times.txt" | paste -sd '|')" "build-cpu-first 353|test-cpu 900|test-cuda 300"
  exit $failures
)
[ $? = 0 ] || fail "the second run stopped or failed (above)"

# A build's progress lines name what is compiled, the precompiled header (clang's .pch, GCC's
# .gch) and files compiled together included (by their target, not CMake's generated file name).
source "$root/scripts/progress.sh"
shown=$(printf '%s\n' "[ 12%] Building CXX object CMakeFiles/ddp_common.dir/cmake_pch.hxx.pch" \
  "[ 25%] Building CXX object CMakeFiles/ddp_core.dir/Unity/unity_0_cxx.cxx.o" \
  "[ 91%] Building CXX object tests/CMakeFiles/ddp_tests.dir/Unity/unity_1_cxx.cxx.o" \
  "[ 30%] Building CXX object CMakeFiles/ddp_trainer.dir/05_ddp/ddp.cpp.o" | sed -nE "$BUILD_FILTER" | paste -sd '|')
same "progress lines" "$shown" "[12%] precompiling <torch/torch.h>|[25%] compiling ddp_core's files together (part 0)|[91%] compiling ddp_tests's files together (part 1)|[30%] compiling 05_ddp/ddp.cpp"

# A first run's estimate comes from a result file (scripts/results.sh): its figure and the CPU
# that measured it, or the fallback, with no figure, when there is no such file or figure.
source "$root/scripts/results.sh"
mkdir -p "$scratch/results"
printf '{"command": "scripts/test.sh", "cpu": "A CPU, 2 cores", "date": "d", "seconds": {"build-cpu-first": 233}}\n' > "$scratch/results/test_phases.json"
same "estimate from a result" "$(DDP_RESULTS_DIR=$scratch/results result_estimate test_phases "many minutes" seconds build-cpu-first)" \
  "about 3 min 53 s on A CPU, 2 cores (results/test_phases.json)"
same "estimate without the figure" "$(DDP_RESULTS_DIR=$scratch/results result_estimate test_phases "many minutes" seconds test-cpu)" "many minutes"
same "estimate without the file" "$(DDP_RESULTS_DIR=$scratch/none result_estimate test_phases "many minutes" seconds test-cpu)" "many minutes"
# A command that quotes its arguments still makes a JSON file (test.sh's own does).
(root=$scratch DDP_RESULTS_DIR=$scratch/results write_result quoted 'scripts/test.sh (DDP_FLAVOURS="cpu cuda")' '"a": 1' > /dev/null)
same "a quoted command, as JSON" "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["command"])' "$scratch/results/quoted.json" 2>&1)" \
  'scripts/test.sh (DDP_FLAVOURS="cpu cuda")'
# No script types a time estimate of its own: each comes from a result file or the last run here.
typed=$(grep -nE '"[^"$]*[0-9]+(\.[0-9]+)?(-[0-9.]+)? ?(s|min|minutes|seconds)\b[^"]*"' "$root"/scripts/{run,test,setup,build,progress,course}.sh |
        grep -vE '^[^:]+:[0-9]+: *#|sleep|timeout|--preempt|into training' || true)
[ -z "$typed" ] || fail "a time estimate typed by hand (take it from a result file: scripts/results.sh): $typed"
grep -q 'result_estimate first_run' "$root/scripts/run.sh" || fail "scripts/run.sh's first build estimate is not results/first_run.json's"

# test.sh itself uses them: its estimates and summary come from timings.sh.
grep -q 'source "$root/scripts/timings.sh"' "$root/scripts/test.sh" || fail "scripts/test.sh does not source scripts/timings.sh"
grep -q '^time_summary$' "$root/scripts/test.sh" || fail "scripts/test.sh does not print the time summary"
[ $failures = 0 ] && echo "timings: every check passed" || echo "timings: $failures check(s) FAILED"
exit $((failures > 0))
