#!/usr/bin/env bash
# exercise: 07.1 Keep the parameters after forward
# kind: coding
# time: 30 min
# build: 07_fsdp 02_spawn
# trusts: common/group/collective_count.cpp common/group/collective_count.h
# proves: with --reshard-after-forward off the CNN at 2 ranks (2 micro-batches a step, a validation
#         before the last step) trains to the fingerprint of the default run, its rings send
#         (m + 1) all-gathers' worth in the last step, m micro-batches, where the default sends (2m + 1), step 7's
#         check says so (OK), Gloo's own count of what rank 0's sends carried is 3 steps x m
#         all-gathers below the default run's (Note [Counted by the backend]: the class's own count
#         can be written to say anything), and its tensor peak is above the default run's
#         (--prefetch 0: the units before fc1 stay whole through fc1's backward); without the flag,
#         all as before.
source "$(dirname "$0")/lib.sh"
# 2 ranks, 256 images each: 4 micro-batches of 64, 2 steps an epoch at --grad-accum 2, so that
# step 3 follows a validation (a forward without backward). --prefetch 0: nothing is whole ahead.
trainer() {
  local name=$1; shift
  DDP_COUNT_COLLECTIVES=1 run 90 "$WORK/$name.log" 07_fsdp --nproc-per-node 2 --model cnn --prefetch 0 --grad-accum 2 --max-steps 3 \
    --train-samples 512 --test-samples 256 --expect-accuracy 0 --out "$WORK/$name" --reset "$@"
  code=$?
  line=$(last_match '^\[rank 0/2\] check: bytes the rings sent' "$WORK/$name.log")
  sent=$(sed -n 's/.*all ranks: \([0-9]*\) = .*/\1/p' <<< "$line")
  shard=$(sed -n 's/.* x \([0-9]*\) shard bytes.*/\1/p' <<< "$line")
  peak=$(sed -n 's/^\[rank 0\/2\] memory: peak of the tensors training allocated \([0-9.]*\) MiB.*/\1/p' "$WORK/$name.log")
  print=$(fingerprint "$WORK/$name.log" 0/2)
  backend_count "$WORK/$name.log" 0/2  # what Gloo's sends carried, counted by the backend
  carried=$SENT_BYTES
}
# The rings' bytes in the last step of 2 micro-batches, all ranks: world x (all-gathers + 1) x (world-1) x shard.
# (The default run's shard bytes: a run that printed no line leaves its own empty.)
bytes() { echo $((2 * ($1 + 1) * 1 * default_shard)); }

trainer default
[ $code = 0 ] || fail "07_fsdp without --reshard-after-forward must train as before, it exited $code: $(tail -n 3 "$WORK/default.log")"
[ -n "$shard" ] && [ -n "$peak" ] && [ -n "$print" ] ||
  fail "07_fsdp without --reshard-after-forward must print its bytes line, its memory peak and its fingerprint as before: $(tail -n 3 "$WORK/default.log")"
default_shard=$shard
[ "$sent" = "$(bytes 4)" ] && [[ $line == *": OK" ]] ||
  fail "without --reshard-after-forward a unit must be gathered again before its backward, as before: (2 x 2 + 1) x $default_shard bytes, $(bytes 4); the run says: ${line#*: check: }"
[ -n "$carried" ] ||
  fail "rank 0 of 07_fsdp did not say, as it left, what its sends carried (DDP_COUNT_COLLECTIVES): did it end as the chapter does? $(tail -n 3 "$WORK/default.log")"
default_peak=$peak default_print=$print default_carried=$carried

trainer off --reshard-after-forward off
grep -q 'not expected: .*--reshard-after-forward' "$WORK/off.log" &&
  fail "07_fsdp does not take --reshard-after-forward on|off yet: add it to FsdpFlags (07_fsdp/fsdp_flags.h, default on) and add_fsdp_flags (fsdp_flags.cpp), and hand it to the FSDP class in step 3 of main.cpp"
if [ "$sent" = "$(bytes 2)" ] && [[ $line == *FAILED ]]; then
  fail "the rings now send (2 + 1) x $default_shard = $sent bytes, right, but step 7 of 07_fsdp/main.cpp still expects (2 x 2 + 1) x: with --reshard-after-forward off make its closed form (and its line) m + 1 all-gathers' worth (m micro-batches)"
fi
[ "$sent" != "$(bytes 4)" ] ||
  fail "with --reshard-after-forward off the rings still send (2 x 2 + 1) x $default_shard bytes in the last step: each unit is still freed after its forward and gathered again before its backward. In forward (07_fsdp/fsdp.cpp) keep it whole when backward will follow (post_backward frees it), and hand the flag to the FSDP class (step 3 of main.cpp)"
[ -z "$sent" ] || [ "$sent" = "$(bytes 2)" ] ||
  fail "with --reshard-after-forward off the last step must send (2 + 1) x $default_shard = $(bytes 2) bytes (2 forwards' all-gathers and one reduce-scatter), it sent $sent. Is a unit left whole after a forward that no backward follows (validation, under torch::NoGradGuard)? Then the next forward gathers nothing and the next backward frees it"
[ $code = 0 ] || fail "07_fsdp --reshard-after-forward off exited $code: $(grep -E 'error|FAILED' "$WORK/off.log" | tail -n 3)"
[ -n "$sent" ] || fail "07_fsdp --reshard-after-forward off printed no 'bytes the rings sent' line: $(tail -n 3 "$WORK/off.log")"
[[ $line == *": OK" ]] || fail "the bytes are right ($sent), but step 7's check does not say OK: ${line#*: check: }"
# Gloo's count, not the class's: over the 3 steps each of the m = 2 micro-batches' backwards
# gathers nothing, one all-gather fewer per micro-batch: (world-1) x shard bytes from rank 0 each.
saved=$((3 * 2 * 1 * default_shard))
[ -n "$carried" ] && [ $((default_carried - carried)) = "$saved" ] ||
  fail "the class says its rings sent $sent bytes in the last step, but Gloo's own count (DDP_COUNT_COLLECTIVES) says rank 0's sends carried ${carried:-nothing} bytes in all, against $default_carried without the flag: keeping each unit whole until its backward saves 3 steps x 2 micro-batches x $default_shard = $saved bytes. Does backward still gather each unit again?"
[ -n "$print" ] || fail "07_fsdp --reshard-after-forward off printed no params fingerprint line: $(tail -n 2 "$WORK/off.log")"
[ "$print" = "$default_print" ] ||
  fail "keeping the parameters whole changes when they are gathered, never their values: the default run ends with fingerprint $default_print, --reshard-after-forward off with $print"
[ -n "$peak" ] || fail "07_fsdp --reshard-after-forward off printed no memory peak: $(tail -n 2 "$WORK/off.log")"
awk -v a="$peak" -v b="$default_peak" 'BEGIN { exit !(a > b) }' ||
  fail "with --reshard-after-forward off the tensor peak is $peak MiB, not above the default's $default_peak MiB: are conv1 and conv2 really kept whole until their backward, or freed after forward and gathered again?"
pass "--reshard-after-forward off: (2 + 1) x $default_shard = $sent bytes in the last step, where the default sends (2 x 2 + 1) x; Gloo carried $saved bytes fewer from rank 0; fingerprint $print, as the default; peak $peak MiB against $default_peak"
