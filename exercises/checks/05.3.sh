#!/usr/bin/env bash
# exercise: 05.3 Accumulate, then all-reduce once
# kind: observation
# time: 15 min
# build: 05_ddp 02_spawn
# proves: the two numbers you wrote down are, for 2 epochs of the CNN at 2 ranks, 160 images, 8
#         a micro-batch, --grad-accum 3 (a run the exercise gives no command for; its --trace
#         here): rank 0's backward passes that ran under no_sync() (its backward spans less its
#         optimizer steps: each step's last micro-batch all-reduces), then the bytes its bucket
#         all-reduces carry in all. One FAIL for any wrong answer, never which number was right.
source "$(dirname "$0")/lib.sh"
read_answer 05.3
run 90 "$WORK/accum.log" 05_ddp --nproc-per-node 2 --model cnn --epochs 2 --grad-accum 3 --batch-size 8 --synthetic \
  --train-samples 160 --test-samples 64 --expect-accuracy 0 --trace "$WORK/accum.json" --out "$WORK/accum" --reset ||
  fail "05_ddp failed: $(tail -n 3 "$WORK/accum.log")"
[ -f "$WORK/accum.rank0.json" ] || fail "05_ddp wrote no trace of rank 0: $(tail -n 3 "$WORK/accum.log")"
# Rank 0's trace: its bucket all-reduces (how many, their bytes in all), its backward passes and
# its optimizer steps.
read -r count truth backwards steps < <(python3 - "$WORK/accum.rank0.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"] if isinstance(d, dict) else d
b = [e["args"]["bytes"] for e in ev if e.get("name", "").startswith("all-reduce bucket")]
n = lambda name: sum(1 for e in ev if e.get("name") == name and e.get("ph") == "X")
print(len(b), sum(b), n("backward"), n("optimizer"))
PY
)
[ "$count" -gt 0 ] && [ "$steps" -gt 0 ] || fail "rank 0's trace holds no bucket all-reduce or step: $(tail -n 3 "$WORK/accum.log")"
no_sync=$(( backwards - steps ))
answer=$(echo $ANSWER)
[[ $answer =~ ^[0-9]+\ [0-9]+$ ]] ||
  fail "you wrote '$ANSWER'; write two numbers: rank 0's backward passes under no_sync(), then the bytes of gradients its bucket all-reduces carry in all"
[ "$answer" = "$no_sync $truth" ] ||
  fail "'$answer' is not right: rank 0's backward passes under no_sync(), then the bytes its bucket all-reduces carry in all (how many steps make an epoch, and which micro-batch of a step all-reduces?)"
pass "$no_sync backward passes under no_sync(), $truth bytes all-reduced"
