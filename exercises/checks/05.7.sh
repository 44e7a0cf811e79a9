#!/usr/bin/env bash
# exercise: 05.7 Whose state, how much
# kind: observation
# time: 10 min
# build: 05_ddp 02_spawn
# proves: the number you wrote down, worked out from the BatchNorm CNN's layer shapes and the
#         greedy partition by size (a tie to the lowest rank), is the bytes of optimizer state that
#         rank 3 of a real --zero run at 5 ranks holds (its "ZeRO-1: optimizer state on this rank"
#         line). The exercise gives no command for that run; going_further/zero.md shows the MLP's
#         shares at 2 ranks and gives a command for the plain CNN's at 4.
source "$(dirname "$0")/lib.sh"
read_answer 05.7
run 120 "$WORK/zero.log" 05_ddp --nproc-per-node 5 --model cnn_bn --zero --synthetic --train-samples 512 --max-steps 2 \
  --test-samples 64 --expect-accuracy 0 --out "$WORK/zero" --reset ||
  fail "05_ddp failed: $(tail -n 3 "$WORK/zero.log")"
line=$(last_match '^\[rank 3/5\] ZeRO-1: optimizer state on this rank' "$WORK/zero.log")
truth=$(echo "$line" | sed -n 's/.*on this rank \([0-9]*\) bytes of \([0-9]*\) (1\/world = \([0-9]*\).*/\1/p')
[ -n "$truth" ] || fail "05_ddp printed no ZeRO-1 line for rank 3: $(tail -n 3 "$WORK/zero.log")"
[[ $ANSWER =~ ^[0-9]+$ ]] || fail "you wrote '$ANSWER'; write the number of bytes alone (05.7: 123)"
[ "$ANSWER" = "$truth" ] ||
  fail "you wrote '$ANSWER'; write the bytes of optimizer state (SGD's momentum, float32) that rank 3 holds at 5 ranks"
pass "rank 3 holds $truth bytes of optimizer state"
