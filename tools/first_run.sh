#!/usr/bin/env bash
# first_run.sh: what a learner waits for, measured. Runs scripts/run.sh in a fresh clone of the
# committed tree (its own build folder, built from nothing) and writes results/first_run.json:
# the seconds until chapter 01 printed its first line, chapter 01's build (before its "== 01_..."
# line), each later chapter's wait for its build and its run, chapter 01's run, and the whole run.
# scripts/run.sh's estimate and the README's figures come from that file.
#
# Usage (nothing else running: the figures are this machine's time): tools/first_run.sh
# Debian's packages are installed already on a machine that ran scripts/setup.sh: their
# download is not in these figures (run.sh's setup step then takes a second).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/results.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
git clone -q --no-local "$root" "$dir/clone"
echo "[first_run] scripts/run.sh in a fresh clone of $(git -C "$root" rev-parse --short HEAD) (log: $dir/run.log)"
rc=0
( cd "$dir/clone" && scripts/run.sh 2>&1 ) | while IFS= read -r line; do
  printf '%s %s\n' "$(date +%s.%N)" "$line"
done > "$dir/run.log" || rc=$?
[ "${PIPESTATUS[0]:-0}" = 0 ] && [ $rc = 0 ] || { tail -n 30 "$dir/run.log"; echo "[first_run] scripts/run.sh FAILED" >&2; exit 1; }
members=$(python3 - "$dir/run.log" <<'PY'
import json, re, sys
lines = [l.rstrip("\n").split(" ", 1) for l in open(sys.argv[1])]
lines = [(float(t), text) for t, text in lines]
start = lines[0][0]
first = next(t for t, text in lines if text.startswith("[rank "))
build01 = next(int(m.group(1)) for _, text in lines if (m := re.match(r"\[build cpu\] done in (\d+) s", text)))
# A chapter starts when run.sh begins to wait for its build ("waiting for NN_... to build"), or,
# built already, at its "== NN_..." line; it ends where the next one starts.
starts = {}
for t, text in lines:
    m = re.match(r"\[build cpu\] waiting for (\d\d_\w+) to build", text) or re.match(r"== (\d\d_\w+)", text)
    if m and m.group(1) not in starts:
        starts[m.group(1)] = t
heads = sorted((t, name) for name, t in starts.items()) + [(lines[-1][0], None)]
chapters = {name: round(heads[i + 1][0] - t, 1) for i, (t, name) in enumerate(heads[:-1])}
out = {"seconds_to_first_output": round(first - start, 1), "chapter01_build_s": build01,
       "chapter_s": chapters, "total_s": round(lines[-1][0] - start, 1)}
print(", ".join(f'"{k}": {json.dumps(v)}' for k, v in out.items()))
PY
)
write_result first_run "tools/first_run.sh" "$members"
