#!/usr/bin/env bash
# exercise: 05.1 How many buckets?
# kind: observation
# time: 15 min
# build: 05_ddp 02_spawn
# proves: the number you wrote down is the number of buckets the CNN's DDP rebuilds at
#         --bucket-cap-mb 0.05, read from the run at check time. At that cap exercise 05.2 (the
#         cap cuts the first bucket too) changes no bucket, so the answer is the same before and
#         after it; the PASS line says why each bucket is as large as it is.
source "$(dirname "$0")/lib.sh"
read_answer 05.1
run 90 "$WORK/cnn.log" 05_ddp --nproc-per-node 2 --model cnn --bucket-cap-mb 0.05 --synthetic --train-samples 512 \
  --test-samples 64 --max-steps 2 --expect-accuracy 0 --out "$WORK/cnn" --reset ||
  fail "05_ddp failed: $(tail -n 3 "$WORK/cnn.log")"
line=$(last_match '^\[rank 0/2\] buckets rebuilt' "$WORK/cnn.log")
truth=$(bucket_count "$line")
[ -n "$truth" ] || fail "05_ddp printed no 'buckets rebuilt' line: $(tail -n 3 "$WORK/cnn.log")"
[ "$ANSWER" = "$truth" ] || fail "you wrote '$ANSWER'; run the CNN with --bucket-cap-mb 0.05 and read the 'buckets rebuilt' line (one number)"
# Why each bucket is as large as it is, bucket by bucket from the line: "bucketN <size> (<tensors>)".
mapfile -t buckets < <(grep -o 'bucket[0-9]* [0-9.]* [KM]\{0,1\}i\{0,1\}B ([^)]*)' <<< "$line")
last=$(sed -n 's/.* to \([^)]*\))$/\1/p' <<< "${buckets[0]}")
why="${buckets[0]} closed only with its last tensor, ${last:-the largest}: the tensors before it hold far less than the first bucket's limit, 1 MiB, and less than 0.05 MiB too, the limit once 05.2 is solved: the same bucket either way"
for ((b = 1; b < ${#buckets[@]}; b++)); do
  if [ $b -lt $((${#buckets[@]} - 1)) ]; then why+="; ${buckets[$b]} reached the cap, 0.05 MiB"
  else why+="; ${buckets[$b]} is what was left, below the cap, when backward ended"; fi
done
pass "$truth buckets: $why"
