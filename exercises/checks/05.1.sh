#!/usr/bin/env bash
# exercise: 05.1 How many buckets?
# kind: observation
# time: 15 min
# build: 05_ddp 02_spawn
# proves: the number you wrote down is the number of buckets the CNN's DDP rebuilds at
#         --bucket-cap-mb 0.01 (as the course is, or with 05.2 solved: the number is read from
#         the run at check time).
source "$(dirname "$0")/lib.sh"
read_answer 05.1
run 90 "$WORK/cnn.log" 05_ddp --nproc-per-node 2 --model cnn --bucket-cap-mb 0.01 --synthetic --train-samples 512 \
  --test-samples 64 --max-steps 2 --expect-accuracy 0 --out "$WORK/cnn" --reset ||
  fail "05_ddp failed: $(tail -n 3 "$WORK/cnn.log")"
line=$(last_match '^\[rank 0/2\] buckets rebuilt' "$WORK/cnn.log")
truth=$(bucket_count "$line")
[ -n "$truth" ] || fail "05_ddp printed no 'buckets rebuilt' line: $(tail -n 3 "$WORK/cnn.log")"
[ "$ANSWER" = "$truth" ] || fail "you wrote '$ANSWER'; run the CNN with --bucket-cap-mb 0.01 and read the 'buckets rebuilt' line (one number)"
pass "${line#*ready: }"
