#!/usr/bin/env bash
# tools/cpu_by_program.py (docs/tests.md, "Where the CPU goes"): a command's busy children are
# counted by their program, processes running before it are not, and bad input exits 2.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
scratch=$(mktemp -d "${TMPDIR:-/tmp}/ddp-cpu-by-program.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
fail() { echo "FAILED: $*"; exit 1; }
# Running before the command, with a second of CPU spent by then: not the command's (its CPU
# time is counted whole, so it would show).
perl -e 'my $t = time + 1.2; 1 while time < $t; sleep 60' &
before=$!
trap 'kill $before 2>/dev/null; rm -rf "$scratch"' EXIT
sleep 1.5
# The command: two children of two programs, one busy for a second or more, one asleep.
out=$(DDP_RESULTS_DIR=$scratch "$root/tools/cpu_by_program.py" --raw "$scratch/raw.json" -- \
  bash -c 'awk "BEGIN { while (x < 1e8) x++ }"; sleep 0.5') || fail "it exited $? for a command that succeeded: $out"
echo "$out"
result=$scratch/cpu_by_program.json
[ -s "$result" ] || fail "no $result"
python3 - "$result" <<'PY' || exit 1
import json, sys
r = json.load(open(sys.argv[1]))
progs = {p["program"]: p for p in r["programs"]}
assert r["command"].startswith("tools/cpu_by_program.py -- bash -c"), r["command"]
awk = [p for n, p in progs.items() if "awk" in n]
assert awk and awk[0]["cpu_s"] >= 0.5 and awk[0]["processes"] == 1, f"awk's busy second not counted: {progs}"
assert not any("perl" in n for n in progs), f"a process running before the command was counted: {progs}"
assert r["machine_busy_core_s"] >= awk[0]["cpu_s"] - 0.2, r
print(f"ok: awk {awk[0]['cpu_s']} s of CPU in 1 process; perl, busy before the command, left out")
PY
# The raw file summarised again gives the same programs.
again=$(DDP_RESULTS_DIR=$scratch/again "$root/tools/cpu_by_program.py" --summarise "$scratch/raw.json" --command "tools/cpu_by_program.py -- again") ||
  fail "--summarise of its own raw file failed: $again"
[ "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["programs"] == json.load(open(sys.argv[2]))["programs"])' "$result" "$scratch/again/cpu_by_program.json")" = True ] ||
  fail "--summarise of the raw file gave other programs"
# A failing command's exit code is the tool's.
DDP_RESULTS_DIR=$scratch "$root/tools/cpu_by_program.py" -- sh -c 'exit 3' > /dev/null; [ $? = 3 ] || fail "a command's exit 3 was not passed on"
for bad in "" "--raw" "--summarise $scratch/none.json --command x" "-- "; do
  # shellcheck disable=SC2086
  "$root/tools/cpu_by_program.py" $bad > /dev/null 2>&1; code=$?
  [ $code = 2 ] || fail "'tools/cpu_by_program.py $bad' exited $code, not 2"
done
echo "PASS: cpu_by_program counts a command's children by program, leaves out what ran before it, and refuses bad input with 2"
