#!/usr/bin/env bash
# exercise: 05.1 How many buckets?
# kind: observation
# time: 15 min
# build: 05_ddp 02_spawn
# proves: the number you wrote down, worked out from the buckets the CNN gets at --bucket-cap-mb
#         0.05 (the run the exercise gives) and the chapter's rule for the first iteration, is the
#         number of bucket all-reduces rank 0 starts in 5 steps of the CNN at --bucket-cap-mb 0.1
#         (its --trace), a cap the exercise gives no command for. It holds before and after
#         exercise 05.2, which changes no bucket at that cap.
source "$(dirname "$0")/lib.sh"
read_answer 05.1
steps=5
run 90 "$WORK/cnn.log" 05_ddp --nproc-per-node 2 --model cnn --bucket-cap-mb 0.1 --synthetic --train-samples 512 \
  --test-samples 64 --batch-size 16 --max-steps $steps --expect-accuracy 0 --trace "$WORK/cnn.json" --out "$WORK/cnn" --reset ||
  fail "05_ddp failed: $(tail -n 3 "$WORK/cnn.log")"
[ -f "$WORK/cnn.rank0.json" ] || fail "05_ddp wrote no trace of rank 0: $(tail -n 3 "$WORK/cnn.log")"
truth=$(grep -c '"name":"all-reduce bucket' "$WORK/cnn.rank0.json")
[ -n "$(last_match '^\[rank 0/2\] buckets rebuilt' "$WORK/cnn.log")" ] || fail "05_ddp printed no 'buckets rebuilt' line: $(tail -n 3 "$WORK/cnn.log")"
[[ $ANSWER =~ ^[0-9]+$ ]] || fail "you wrote '$ANSWER'; write one number: the bucket all-reduces (not the stop flag's) rank 0 starts in $steps steps of the CNN at --bucket-cap-mb 0.1"
[ "$ANSWER" = "$truth" ] || fail "$ANSWER is not it: the bucket all-reduces (not the stop flag's) rank 0 starts in $steps steps of the CNN at --bucket-cap-mb 0.1"
pass "$truth bucket all-reduces in $steps steps"
