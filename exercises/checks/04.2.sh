#!/usr/bin/env bash
# exercise: 04.2 What travels first?
# kind: observation
# time: 10 min
# build: 04_grad_hooks 02_spawn
# proves: the size you wrote down is that of the first all-reduce rank 0 starts in every step of
#         its --trace (one value in every step): the gradient backward produces first.
source "$(dirname "$0")/lib.sh"
read_answer 04.2
run 60 "$WORK/run.log" 02_spawn --nproc-per-node 2 -- "$B/04_grad_hooks" --comm async --trace "$WORK/04.json" ||
  fail "the run failed: $(tail -n 3 "$WORK/run.log")"
# Rank 0's first all-reduce of each step (steps start at a forward), as bytes; one value if all agree.
truth=$(python3 - "$WORK/04.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ev = [e for e in (d["traceEvents"] if isinstance(d, dict) else d) if e.get("pid") == 0 and e.get("ph") == "X"]
fwd = sorted(e["ts"] for e in ev if e["name"] == "forward") + [float("inf")]
firsts = set()
for a, b in zip(fwd, fwd[1:]):
    started = sorted((e["ts"], e["args"]["bytes"]) for e in ev if e["name"] == "all-reduce" and a <= e["ts"] < b)
    if started: firsts.add(started[0][1])
print(" ".join(map(str, sorted(firsts))))
PY
)
[[ $truth =~ ^[0-9]+$ ]] || fail "could not read one first all-reduce size from the trace (read: '$truth')"
[ "$ANSWER" = "$truth" ] ||
  fail "you wrote '$ANSWER'; open the trace, find the first all-reduce of a step on rank 0 and read its bytes (one number)"
pass "every step's first all-reduce carries $truth bytes: one float, the gradient of the last layer's bias"
