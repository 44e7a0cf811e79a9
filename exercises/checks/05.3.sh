#!/usr/bin/env bash
# exercise: 05.3 Accumulate, then all-reduce once
# kind: observation
# time: 15 min
# build: 05_ddp 02_spawn
# proves: the number you wrote down is the bytes of the bucket all-reduces rank 0 started in 2
#         epochs of the CNN at 2 ranks, 160 images, 8 a micro-batch, --grad-accum 3 (its --trace),
#         a run the exercise gives no command for.
source "$(dirname "$0")/lib.sh"
read_answer 05.3
run 90 "$WORK/accum.log" 05_ddp --nproc-per-node 2 --model cnn --epochs 2 --grad-accum 3 --batch-size 8 --synthetic \
  --train-samples 160 --test-samples 64 --expect-accuracy 0 --trace "$WORK/accum.json" --out "$WORK/accum" --reset ||
  fail "05_ddp failed: $(tail -n 3 "$WORK/accum.log")"
[ -f "$WORK/accum.rank0.json" ] || fail "05_ddp wrote no trace of rank 0: $(tail -n 3 "$WORK/accum.log")"
# The bucket all-reduces rank 0 started: how many, and their bytes in all.
read -r count truth < <(python3 - "$WORK/accum.rank0.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
b = [e["args"]["bytes"] for e in (d["traceEvents"] if isinstance(d, dict) else d) if e.get("name", "").startswith("all-reduce bucket")]
print(len(b), sum(b))
PY
)
[ "$count" -gt 0 ] || fail "rank 0's trace holds no bucket all-reduce: $(tail -n 3 "$WORK/accum.log")"
[[ $ANSWER =~ ^[0-9]+$ ]] || fail "you wrote '$ANSWER'; write one number: the bytes of gradients rank 0's bucket all-reduces carry in all"
[ "$ANSWER" = "$truth" ] || fail "$ANSWER is not it: the bytes of gradients rank 0's bucket all-reduces carry in all"
pass "$truth bytes"
