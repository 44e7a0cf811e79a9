#!/usr/bin/env bash
# exercise: 04.2 What travels first?
# kind: observation
# time: 10 min
# build: 04_grad_hooks 02_spawn
# proves: the four numbers you wrote down, from 04's trace and the order chapter 03 all-reduces
#         in, are, for each of 04's all-reduces in the order they start, the bytes chapter 03's
#         all-reduces carry before the same gradient's (rank 0, every step), whatever exercise
#         03.2 changed in chapter 03.
source "$(dirname "$0")/lib.sh"
read_answer 04.2
run 60 "$WORK/run.log" 02_spawn --nproc-per-node 2 -- "$B/04_grad_hooks" --comm async --steps 3 --trace "$WORK/04.json" ||
  fail "the run failed: $(tail -n 3 "$WORK/run.log")"
# Rank 0's all-reduces of each step (a step starts at a forward), as bytes in the order they
# started; reversed, the parameters in definition order, chapter 03's. For each of 04's, the sum
# of the parameters before it in that order. One line when every step agrees.
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
        before = [sum(params[:i]) for i in range(len(params))]
        answers.add(" ".join(str(n) for n in before[::-1]))
print(answers.pop() if len(answers) == 1 else "-")
PY
)
[[ $truth =~ ^[0-9]+( [0-9]+){3}$ ]] || fail "could not read four sizes per step from chapter 04's trace (read: '$truth')"
answer=$(echo "$ANSWER" | tr -s ' ')
[[ $answer =~ ^[0-9]+( [0-9]+){3}$ ]] || fail "you wrote '$ANSWER'; write four numbers of bytes, in the order 04's all-reduces start"
[ "$answer" = "$truth" ] ||
  fail "'$answer' is not right: not, for each of 04's all-reduces in the order they start, the bytes chapter 03's all-reduces carry in a step before the same gradient's"
pass "$truth bytes"
