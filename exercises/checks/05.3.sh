#!/usr/bin/env bash
# exercise: 05.3 Accumulate, then all-reduce once
# kind: observation
# time: 15 min
# build: 05_ddp 02_spawn
# proves: the number you wrote down is the number of bucket all-reduces rank 0 started in 6
#         optimizer steps of 4 micro-batches each (its --trace): one per step, not one per backward,
#         since no_sync() keeps the first three backwards of a step local.
source "$(dirname "$0")/lib.sh"
read_answer 05.3
run 90 "$WORK/accum.log" 05_ddp --nproc-per-node 2 --max-steps 6 --grad-accum 4 --synthetic --train-samples 2048 \
  --test-samples 64 --expect-accuracy 0 --trace "$WORK/accum.json" --out "$WORK/accum" --reset ||
  fail "05_ddp failed: $(tail -n 3 "$WORK/accum.log")"
[ -f "$WORK/accum.rank0.json" ] || fail "05_ddp wrote no trace of rank 0: $(tail -n 3 "$WORK/accum.log")"
truth=$(grep -c '"name":"all-reduce bucket' "$WORK/accum.rank0.json")
backwards=$(grep -c '"name":"backward"' "$WORK/accum.rank0.json")
[ "$ANSWER" = "$truth" ] ||
  fail "you wrote '$ANSWER'; count the all-reduces of the buckets (not the stop-flag's) in rank 0's trace"
pass "$backwards backward passes, $truth bucket all-reduce(s): the other backwards ran under no_sync()"
