#!/usr/bin/env bash
# exercise: 05.8 Bytes on the wire with PowerSGD
# kind: observation
# time: 15 min
# build: 05_ddp 02_spawn
# proves: the number you wrote down, worked out from the MLP's layer shapes and PowerSGD's rule
#         for which tensors to compress, is the bytes each rank of a real --comm-hook powersgd run
#         at --powersgd-rank 5 all-reduces per compressed step (rank 1's "PowerSGD from step"
#         line), a run the exercise gives no command for (the page shows rank 1's).
source "$(dirname "$0")/lib.sh"
read_answer 05.8
run 120 "$WORK/powersgd.log" 05_ddp --nproc-per-node 2 --model mlp --comm-hook powersgd --powersgd-start-iter 2 --powersgd-rank 5 \
  --synthetic --train-samples 512 --max-steps 3 --test-samples 64 --expect-accuracy 0 --out "$WORK/powersgd" --reset ||
  fail "05_ddp failed: $(tail -n 3 "$WORK/powersgd.log")"
line=$(last_match '^\[rank 1/2\] PowerSGD from step' "$WORK/powersgd.log")
truth=$(echo "$line" | sed -n 's/.*this rank all-reduces \([0-9]*\) bytes.*/\1/p')
[ -n "$truth" ] || fail "05_ddp printed no PowerSGD bytes line: $(tail -n 3 "$WORK/powersgd.log")"
[[ $ANSWER =~ ^[0-9]+$ ]] || fail "you wrote '$ANSWER'; write one number: the bytes rank 1 all-reduces per compressed step"
[ "$ANSWER" = "$truth" ] || fail "$ANSWER is not it: the bytes rank 1 all-reduces per compressed step"
pass "rank 1 all-reduces $truth bytes per step"
