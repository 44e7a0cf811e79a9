#!/usr/bin/env bash
# exercise: 04.2 What travels first?
# kind: observation
# time: 10 min
# build: 03_manual_allreduce 02_spawn
# proves: the size you wrote down, from 04's trace and what chapter 03 does, is that of the first
#         all-reduce rank 0 starts in every step of chapter 03's --trace (one value in every step):
#         03 all-reduces in parameter order after backward, 04's hooks in the order backward makes
#         the gradients ready. The exercise traces 04; the check traces 03, which it gives no command for.
source "$(dirname "$0")/lib.sh"
read_answer 04.2
run 60 "$WORK/run.log" 02_spawn --nproc-per-node 2 -- "$B/03_manual_allreduce" --steps 3 --trace "$WORK/03.json" ||
  fail "the run failed: $(tail -n 3 "$WORK/run.log")"
# Rank 0's all-reduces of each step (steps start at a forward), as bytes in the order they started:
# "first" is one value if every step agrees, "order" the sizes of one step.
read -r truth order < <(python3 - "$WORK/03.rank0.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ev = [e for e in (d["traceEvents"] if isinstance(d, dict) else d) if e.get("pid") == 0 and e.get("ph") == "X"]
fwd = sorted(e["ts"] for e in ev if e["name"] == "forward") + [float("inf")]
firsts, order = set(), []
for a, b in zip(fwd, fwd[1:]):
    started = [n for _, n in sorted((e["ts"], e["args"]["bytes"]) for e in ev if e["name"] == "all-reduce" and a <= e["ts"] < b)]
    if started: firsts.add(started[0]); order = started
print(" ".join(map(str, sorted(firsts))) if len(firsts) == 1 else "-", ",".join(map(str, order)))
PY
)
[[ $truth =~ ^[0-9]+$ ]] || fail "could not read one first all-reduce size from chapter 03's trace (read: '$truth')"
[ "$ANSWER" = "$truth" ] ||
  fail "you wrote '$ANSWER'; write one number: the bytes of the gradient chapter 03 all-reduces first in a step (the first of model->parameters(), 4 bytes a float)"
pass "chapter 03 starts every step with $truth bytes, the first layer's weight (16 x 8 floats): after backward, in parameter order (bytes ${order//,/, }); 04's hooks start them in the order backward makes them ready, the reverse, the last layer's bias first. The first layer's weight, last in 04, is the all-reduce nothing left in backward can hide"
