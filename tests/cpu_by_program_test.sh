#!/usr/bin/env bash
# tools/cpu_by_program.py (docs/tests.md, "Where the CPU goes"): a command's busy child is counted
# under its program, a process running before the command is not, a process under a ctest is
# counted under its test, a raw file of the tool's first version (which kept every process, those
# of its first sweep too) is summarised without those, a command's exit code is passed on, and bad
# input exits 2.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
scratch=$(mktemp -d "${TMPDIR:-/tmp}/ddp-cpu-by-program.XXXXXX")
before=""
trap '[ -z "$before" ] || kill $before 2>/dev/null; rm -rf "$scratch"' EXIT
fail() { echo "FAILED: $*"; exit 1; }
# Programs of names no other test runs (ctest runs tests beside this one, and the tool counts the
# whole machine): copies of perl and awk.
cp "$(command -v perl)" "$scratch/ddp_cpu_before" && cp "$(command -v awk)" "$scratch/ddp_cpu_busy" || fail "could not copy perl and awk"
# Running before the command, with a second of its own CPU spent by then (times(), not the
# clock): not the command's. Its CPU is counted whole, so it would show.
"$scratch/ddp_cpu_before" -e '1 while (times)[0] < 1.0; sleep 60' &
before=$!
for _ in $(seq 1 100); do
  [ "$(awk '{ print $14 }' "/proc/$before/stat" 2>/dev/null || echo 0)" -ge "$(getconf CLK_TCK)" ] && break
  sleep 0.1
done
# The command: a busy child (a second or more of CPU) and a sleeping one.
out=$(DDP_RESULTS_DIR=$scratch "$root/tools/cpu_by_program.py" --raw "$scratch/raw.json" -- \
  bash -c "'$scratch/ddp_cpu_busy' 'BEGIN { while (x < 1e8) x++ }'; sleep 0.5") || fail "it exited $? for a command that succeeded: $out"
echo "$out"
result=$scratch/cpu_by_program.json
[ -s "$result" ] || fail "no $result"
python3 - "$result" <<'PY' || exit 1
import json, sys
r = json.load(open(sys.argv[1]))
progs = {p["program"]: p for p in r["programs"]}
assert r["command"].startswith("tools/cpu_by_program.py -- bash -c"), r["command"]
busy = progs.get("ddp_cpu_busy")
assert busy and busy["cpu_s"] >= 0.5 and busy["processes"] == 1, f"the busy child's CPU was not counted under its program: {progs}"
assert "ddp_cpu_before" not in progs, f"a process running before the command was counted: {progs}"
assert r["machine_busy_core_s"] >= busy["cpu_s"] - 0.2, r
assert "tests" not in r, f"a command with no ctest in it has tests: {r['tests']}"
print(f"ok: ddp_cpu_busy {busy['cpu_s']} s of CPU in 1 process; ddp_cpu_before, busy before the command, left out")
PY
# By test: under a ctest (a copy of bash of that name), a GoogleTest's CPU counts under its filter's
# name (with its program's where the filter names many tests), and a test that runs a ctest of its
# own keeps what runs under that one (the outermost).
cp "$(command -v bash)" "$scratch/ctest" || fail "could not copy bash"
busy_loop="'$scratch/ddp_cpu_busy' 'BEGIN { while (x < 1e8) x++ }'"
echo "'$scratch/ctest' '$scratch/inner.sh'; true" > "$scratch/outer.sh"
echo "$busy_loop inner; true" > "$scratch/inner.sh"
DDP_RESULTS_DIR=$scratch/bytest "$root/tools/cpu_by_program.py" -- "$scratch/ctest" -c \
  "$busy_loop --gtest_filter=Fake.ByItsFilter; $busy_loop --gtest_filter=Fake.*; bash '$scratch/outer.sh'; true" > /dev/null ||
  fail "a command under a ctest failed"
python3 - "$scratch/bytest/cpu_by_program.json" "bash $scratch/outer.sh" <<'PY' || exit 1
import json, sys
r = json.load(open(sys.argv[1]))
tests = {t["test"].strip(): t["cpu_s"] for t in r.get("tests", [])}
assert tests.get("Fake.ByItsFilter", 0) >= 0.5, f"a GoogleTest's CPU is not under its filter's name: {tests}"
assert tests.get("ddp_cpu_busy --gtest_filter=Fake.*", 0) >= 0.5, f"a filter of many tests is not named with its program: {tests}"
assert tests.get(sys.argv[2], 0) >= 0.5, f"the CPU under a test's own ctest is not the test's: {tests}"
assert not any("inner" in t for t in tests), f"a test inside a test's own ctest was counted apart: {tests}"
# Each test's share is its CPU over the same total (the machine's other processes in it too).
share = {t["test"].strip(): t["share_pct"] / t["cpu_s"] for t in r["tests"]}
assert max(share.values()) - min(share.values()) <= 0.05 * max(share.values()), f"shares not in proportion to the CPU: {r['tests']}"
print(f"ok: by test, {tests}")
PY
# A raw file of the first version: every process kept, the first sweep's included. Those are
# left out when it is summarised (here ddp_cpu_before, seen first at t=1.0; the others later).
python3 - "$scratch/legacy.json" <<'PY'
import json, sys
procs = [["1:1", "perl", "/x/ddp_cpu_before", 500, 1.0, 9.0, "ddp_cpu_before"],
         ["2:5", "awk", "/x/ddp_cpu_busy", 150, 1.2, 3.0, "ddp_cpu_busy a"],
         ["3:6", "awk", "/x/ddp_cpu_busy", 50, 2.0, 3.0, "ddp_cpu_busy a"],
         ["4:7", "f", "/x/fsdp (deleted)", 100, 2.0, 3.0, "fsdp"],
         ["5:8", "f", "/x/fsdp", 100, 2.5, 3.0, "fsdp b"]]
json.dump({"wall": 9, "busy_core_s": 12, "hz": 100, "procs": procs}, open(sys.argv[1], "w"))
PY
DDP_RESULTS_DIR=$scratch/legacy "$root/tools/cpu_by_program.py" --summarise "$scratch/legacy.json" --command "tools/cpu_by_program.py -- legacy" > /dev/null ||
  fail "--summarise of a first version's raw file failed"
python3 - "$scratch/legacy/cpu_by_program.json" <<'PY' || exit 1
import json, sys
r = json.load(open(sys.argv[1]))
got = {p["program"]: (p["cpu_s"], p["processes"], p["command_lines"]) for p in r["programs"]}
want = {"ddp_cpu_busy": (2.0, 2, 1), "fsdp": (2.0, 2, 2)}
assert got == want, f"summarised {got}, not {want}"
print("ok: a first version's raw file: its first sweep left out, two processes of one command line, a replaced program's file counted as the program")
PY
# A failing command's exit code is the tool's; a signal's as a shell gives it.
DDP_RESULTS_DIR=$scratch "$root/tools/cpu_by_program.py" -- sh -c 'exit 3' > /dev/null; [ $? = 3 ] || fail "a command's exit 3 was not passed on"
DDP_RESULTS_DIR=$scratch "$root/tools/cpu_by_program.py" -- sh -c 'kill -TERM $$' > /dev/null; code=$?
[ $code = 143 ] || fail "a command ended by SIGTERM: the tool exited $code, not 143"
for bad in "" "--raw" "--summarise $scratch/none.json --command x" "-- "; do
  # shellcheck disable=SC2086
  "$root/tools/cpu_by_program.py" $bad > /dev/null 2>&1; code=$?
  [ $code = 2 ] || fail "'tools/cpu_by_program.py $bad' exited $code, not 2"
done
echo "PASS: cpu_by_program counts a command's children by program and by test, leaves out what ran before it, reads its first version's files, passes the exit code on, and refuses bad input with 2"
