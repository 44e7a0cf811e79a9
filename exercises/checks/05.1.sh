#!/usr/bin/env bash
# exercise: 05.1 How many buckets?
# kind: observation
# time: 15 min
# build: 05_ddp 02_spawn
# proves: the two numbers you wrote down, worked out from the buckets the CNN gets at
#         --bucket-cap-mb 0.05 (the run the exercise gives) and the chapter's rules, are the bucket
#         all-reduces rank 0 starts in 5 steps of the CNN at --bucket-cap-mb 0.1 and at 0.001
#         (their --trace), caps the exercise gives no command for; the second on the course as it
#         is before exercise 05.2.
source "$(dirname "$0")/lib.sh"
read_answer 05.1
steps=5
# count <cap>: sets n to the bucket all-reduces (not the stop flag's) of rank 0's trace; the log is $WORK/cnn-<cap>.log.
count() {
  run 90 "$WORK/cnn-$1.log" 05_ddp --nproc-per-node 2 --model cnn --bucket-cap-mb "$1" --synthetic --train-samples 512 \
    --test-samples 64 --batch-size 16 --max-steps $steps --expect-accuracy 0 --trace "$WORK/cnn-$1.json" --out "$WORK/cnn-$1" --reset ||
    fail "05_ddp failed: $(tail -n 3 "$WORK/cnn-$1.log")"
  [ -f "$WORK/cnn-$1.rank0.json" ] || fail "05_ddp wrote no trace of rank 0: $(tail -n 3 "$WORK/cnn-$1.log")"
  [ -n "$(last_match '^\[rank 0/2\] buckets rebuilt' "$WORK/cnn-$1.log")" ] || fail "05_ddp printed no 'buckets rebuilt' line: $(tail -n 3 "$WORK/cnn-$1.log")"
  n=$(grep -c '"name":"all-reduce bucket' "$WORK/cnn-$1.rank0.json")
}
count 0.1; at_01=$n
count 0.001; at_0001=$n
grep -q 'holds 1 MiB (the first)' <<< "$(last_match '^\[rank 0/2\] buckets rebuilt' "$WORK/cnn-0.001.log")" ||
  fail "your course has exercise 05.2 solved, and the second number is for the course before it: take your 05.2 change out for this check (git stash; scripts/exercise.sh 05.1; git stash pop)"
check_two_parts "the bucket all-reduces rank 0 starts in $steps steps of the CNN at --bucket-cap-mb 0.1, a space, then at 0.001 (two numbers)" \
  "the count at 0.1 MiB" "$at_01" "the count at 0.001 MiB" "$at_0001" "Note [Buckets], and New concepts on the first iteration"
pass "$at_01 bucket all-reduces in $steps steps at 0.1 MiB, $at_0001 at 0.001 MiB"
