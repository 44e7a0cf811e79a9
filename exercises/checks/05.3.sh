#!/usr/bin/env bash
# exercise: 05.3 Accumulate, then all-reduce once
# kind: observation
# time: 15 min
# build: 05_ddp 02_spawn
# proves: the number you wrote down, worked out from the MLP's trace the exercise gives and the
#         CNN's parameter count, is the bytes of the bucket all-reduces rank 0 started in 4 optimizer
#         steps of the CNN with 3 micro-batches each (its --trace), a run the exercise gives no
#         command for: every gradient once per optimizer step, not once per backward, since
#         no_sync() keeps the first micro-batches of a step local, whatever the buckets.
source "$(dirname "$0")/lib.sh"
read_answer 05.3
steps=4 accum=3
run 90 "$WORK/accum.log" 05_ddp --nproc-per-node 2 --model cnn --max-steps $steps --grad-accum $accum --batch-size 8 --synthetic \
  --train-samples 512 --test-samples 64 --expect-accuracy 0 --trace "$WORK/accum.json" --out "$WORK/accum" --reset ||
  fail "05_ddp failed: $(tail -n 3 "$WORK/accum.log")"
[ -f "$WORK/accum.rank0.json" ] || fail "05_ddp wrote no trace of rank 0: $(tail -n 3 "$WORK/accum.log")"
# The bucket all-reduces rank 0 started: how many, and their bytes in all; its backward passes.
read -r count truth < <(python3 - "$WORK/accum.rank0.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
b = [e["args"]["bytes"] for e in (d["traceEvents"] if isinstance(d, dict) else d) if e.get("name", "").startswith("all-reduce bucket")]
print(len(b), sum(b))
PY
)
backwards=$(grep -c '"name":"backward"' "$WORK/accum.rank0.json")
[ "$count" -gt 0 ] || fail "rank 0's trace holds no bucket all-reduce: $(tail -n 3 "$WORK/accum.log")"
[ "$ANSWER" = "$truth" ] ||
  fail "you wrote '$ANSWER'; write one number: the bytes of gradients rank 0's bucket all-reduces carry in all, over $steps optimizer steps of $accum micro-batches (float32: 4 bytes a parameter)"
pass "$truth bytes in $backwards backward passes"
