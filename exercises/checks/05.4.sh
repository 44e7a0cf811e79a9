#!/usr/bin/env bash
# exercise: 05.4 Gradients stored once
# kind: observation
# time: 10 min
# build: 05_ddp 02_spawn
# proves: the number you wrote down, worked out from cnn_bn's layer shapes (the exercise gives no
#         command for that model), is the number of bytes of gradient storage that
#         --gradient-as-bucket-view saved each rank in a real run (the "gradient memory" lines of
#         two runs, with and without the flag).
source "$(dirname "$0")/lib.sh"
read_answer 05.4
for mode in copies views; do
  flag=$([ "$mode" = views ] && echo --gradient-as-bucket-view)
  run 90 "$WORK/$mode.log" 05_ddp --nproc-per-node 2 --model cnn_bn --synthetic --train-samples 512 --test-samples 64 \
    --max-steps 2 --expect-accuracy 0 --out "$WORK/$mode" --reset $flag ||
    fail "05_ddp failed: $(tail -n 3 "$WORK/$mode.log")"
done
# "gradient memory: ... (<buckets> + <apart> bytes...": the bytes held apart from the buckets.
apart() { last_match '^\[rank 0/2\] gradient memory' "$1" | sed -n 's/.*(\([0-9]*\) + \([0-9]*\) bytes.*/\2/p'; }
copies=$(apart "$WORK/copies.log") views=$(apart "$WORK/views.log")
[ -n "$copies" ] && [ -n "$views" ] || fail "05_ddp printed no 'gradient memory' line: $(tail -n 3 "$WORK/views.log")"
truth=$((copies - views))
[ "$ANSWER" = "$truth" ] ||
  fail "you wrote '$ANSWER'; a float32 gradient takes 4 bytes per parameter; count cnn_bn's: the CNN's, plus a weight and a bias per channel of each BatchNorm2d (one number, in bytes)"
pass "$truth bytes saved per rank"
