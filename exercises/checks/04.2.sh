#!/usr/bin/env bash
# exercise: 04.2 What travels first?
# kind: observation
# time: 10 min
# build: 04_grad_hooks 02_spawn
# proves: the bytes you wrote down, from 04's trace and the order chapter 03 all-reduces in, are
#         those of chapter 03's all-reduces before that of the gradient 04 all-reduces second
#         (rank 0, every step), whatever exercise 03.2 changed in chapter 03.
source "$(dirname "$0")/lib.sh"
read_answer 04.2
run 60 "$WORK/run.log" 02_spawn --nproc-per-node 2 -- "$B/04_grad_hooks" --comm async --steps 3 --trace "$WORK/04.json" ||
  fail "the run failed: $(tail -n 3 "$WORK/run.log")"
# Rank 0's all-reduces of each step (a step starts at a forward), as bytes in the order they
# started, reversed: the parameters in definition order, chapter 03's. The second to start is
# the second-to-last parameter; 03 all-reduces every parameter before it first. One value when
# every step agrees.
truth=$(python3 - "$WORK/04.rank0.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ev = [e for e in (d["traceEvents"] if isinstance(d, dict) else d) if e.get("pid") == 0 and e.get("ph") == "X"]
fwd = sorted(e["ts"] for e in ev if e["name"] == "forward") + [float("inf")]
answers = set()
for a, b in zip(fwd, fwd[1:]):
    sizes = [n for _, n in sorted((e["ts"], e["args"]["bytes"]) for e in ev if e["name"] == "all-reduce" and a <= e["ts"] < b)]
    if sizes:
        params = sizes[::-1]
        answers.add(sum(params[:-2]))
print(answers.pop() if len(answers) == 1 else "-")
PY
)
[[ $truth =~ ^[0-9]+$ ]] || fail "could not read one size per step from chapter 04's trace (read: '$truth')"
[[ $ANSWER =~ ^[0-9]+$ ]] || fail "you wrote '$ANSWER'; write one number of bytes"
[ "$ANSWER" = "$truth" ] ||
  fail "you wrote $ANSWER: not the bytes of the all-reduces chapter 03 starts, in a step, before the one of the gradient chapter 04 all-reduces second"
pass "$truth bytes"
