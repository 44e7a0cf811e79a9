#!/usr/bin/env bash
# exercise: 05.2 A small cap for the first bucket too
# kind: coding
# time: 25 min
# build: 05_ddp 02_spawn
# trusts: common/group/collective_count.cpp common/group/collective_count.h
# proves: a --bucket-cap-mb below 1 MiB now cuts the first bucket too (the MLP at 0.1 MiB is two
#         buckets or more, and the log says where the first one closes; at a second cap that the
#         check draws each time, between 0.002 and 0.009 MiB, the MLP is three buckets, the
#         first one fc3 alone, and the log names that cap, so no limit written into the code
#         passes), while the default run keeps its 1 MiB first bucket (the CNN is still
#         two buckets, and the log says 1 MiB) and --one-bucket its one bucket; and the new
#         buckets still average right: 2 ranks end bit-identical to the one-bucket run. The
#         backend's count of all-reduces holds the log to the buckets that really ran.
source "$(dirname "$0")/lib.sh"
# Every run's backend counts its all-reduces (Note [Counted by the backend]): what a log line
# says about the buckets is held to the collectives that really ran.
export DDP_COUNT_COLLECTIVES=1
# A short run of 2 ranks on a little synthetic data; the line that matters comes after step 1.
trainer() {
  local name=$1; shift
  run 90 "$WORK/$name.log" 05_ddp --nproc-per-node 2 --synthetic --train-samples 512 --test-samples 64 --max-steps 3 \
    --expect-accuracy 0 --out "$WORK/$name" --reset "$@" || fail "05_ddp $* failed: $(tail -n 3 "$WORK/$name.log")"
  line=$(last_match '^\[rank 0/2\] buckets rebuilt' "$WORK/$name.log")
  [ -n "$line" ] || fail "05_ddp $* printed no 'buckets rebuilt' line"
  count=$(bucket_count "$line")
  [ -n "$count" ] || fail "could not read the number of buckets from: $line"
  print=$(fingerprint "$WORK/$name.log" 0/2)
  backend_count "$WORK/$name.log" 0/2
  read -r _ allreduces bytes _ <<< "$COUNT"
  [ -n "$allreduces" ] || fail "rank 0 of 05_ddp $* did not say what its process group ran (DDP_COUNT_COLLECTIVES): did it end as the chapter does?"
}
trainer small --bucket-cap-mb 0.1
[ "$count" -ge 2 ] ||
  fail "the MLP at --bucket-cap-mb 0.1 is still $count bucket: the first bucket closes at 1 MiB whatever the cap; in finish_backward (05_ddp/ddp.cpp, step 7) make its limit the cap when the cap is smaller (${line#*ready: })"
small_line=$line small_print=$print
grep -q 'holds 1 MiB (the first one filled)' <<< "$small_line" &&
  fail "the buckets are right, but the log still says the first one closes at 1 MiB: make describe_buckets (05_ddp/ddp_interface.cpp) print the first bucket's real limit"
grep -q 'holds 0.1 MiB (the first one filled)' <<< "$small_line" ||
  fail "the log must say where the first bucket closes now, 'a bucket closes once it holds 0.1 MiB (the first one filled)': make describe_buckets (05_ddp/ddp_interface.cpp) print the first bucket's real limit"
# A cap below fc3's 10 KiB: the first bucket closes after fc3's two tensors, fc2's and fc1's
# make one each (the cap is below either weight alone).
cap=0.00$((RANDOM % 8 + 2))
trainer drawn --bucket-cap-mb "$cap"
[ "$count" = 3 ] && grep -q "holds $cap MiB (the first one filled)" <<< "$line" ||
  fail "at --bucket-cap-mb $cap (a cap the check drew) the MLP must be three buckets, and the log must say the first one closes at $cap MiB; it is $count, and says: ${line#*ready: }. The first bucket's limit is the smaller of 1 MiB and the cap, whatever the cap"
drawn_count=$count drawn_allreduces=$allreduces drawn_bytes=$bytes
trainer one --one-bucket
[ "$count" = 1 ] || fail "--one-bucket must stay one bucket, it is now $count: keep kOneBucket as the first bucket's limit there"
# 3 steps: the first all-reduces one bucket in both runs, steps 2 and 3 the rebuilt buckets, one
# all-reduce each; every other collective is the same in both, and so are the bytes.
[ "$drawn_bytes" = "$bytes" ] && [ $((drawn_allreduces - allreduces)) = $((2 * (drawn_count - 1))) ] ||
  fail "at --bucket-cap-mb $cap the log says $drawn_count buckets, but the process group ran $drawn_allreduces all-reduces ($drawn_bytes bytes) where --one-bucket ran $allreduces ($bytes bytes): the buckets must really be cut, each one all-reduce a step once rebuilt, not only described"
[ -n "$print" ] || fail "05_ddp --one-bucket printed no params fingerprint line: $(tail -n 2 "$WORK/one.log")"
[ "$print" = "$small_print" ] ||
  fail "at 2 ranks every bucket layout gives the same average, but --bucket-cap-mb 0.1 ended with fingerprint $small_print and --one-bucket with $print: are the gradients copied into and out of the new buckets?"
trainer cnn --model cnn
[ "$count" -ge 2 ] ||
  fail "without --bucket-cap-mb (25 MiB) the first bucket must still close at 1 MiB, as in PyTorch: the CNN is now $count bucket, the course as it was gives it 2"
grep -q 'holds 1 MiB (the first one filled) or 25 MiB' <<< "$line" ||
  fail "without --bucket-cap-mb the log must still say 'a bucket closes once it holds 1 MiB (the first one filled) or 25 MiB', it says: ${line#*ready: }"
pass "the MLP at a cap of 0.1 MiB: ${small_line#*ready: }; the default run keeps its 1 MiB first bucket; fingerprint $small_print, as --one-bucket"
