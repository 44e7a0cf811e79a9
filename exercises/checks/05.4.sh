#!/usr/bin/env bash
# exercise: 05.4 Gradients stored once
# kind: observation
# time: 10 min
# build: 05_ddp 02_spawn
# proves: the world sizes you wrote down, worked out from what --gradient-as-bucket-view changes
#         in a step (the exercise gives no command for these sizes), are those of 5, 6, 7 and 8 at
#         which the MLP's 3 steps end with the same fingerprint with the flag as without it (two
#         real runs at each size).
source "$(dirname "$0")/lib.sh"
read_answer 05.4
[[ $ANSWER =~ ^[0-9]+([ ,]+[0-9]+)*$ ]] || fail "you wrote '$ANSWER'; write world sizes of 5, 6, 7 and 8, separated by spaces"
same=()
for world in 5 6 7 8; do
  for mode in copies views; do
    flag=$([ "$mode" = views ] && echo --gradient-as-bucket-view)
    run 120 "$WORK/$mode-$world.log" 05_ddp --nproc-per-node $world --synthetic --train-samples 512 --test-samples 64 \
      --max-steps 3 --expect-accuracy 0 --out "$WORK/$mode-$world" --reset $flag ||
      fail "05_ddp failed at world size $world: $(tail -n 3 "$WORK/$mode-$world.log")"
  done
  copies=$(fingerprint "$WORK/copies-$world.log" 0/$world) views=$(fingerprint "$WORK/views-$world.log" 0/$world)
  [ -n "$copies" ] && [ -n "$views" ] || fail "05_ddp printed no params fingerprint at world size $world: $(tail -n 3 "$WORK/views-$world.log")"
  [ "$copies" = "$views" ] && same+=("$world")
done
truth="${same[*]}"
mine=$(tr ', ' '\n\n' <<< "$ANSWER" | grep . | sort -n -u | tr '\n' ' ')
[ "${mine% }" = "$truth" ] ||
  fail "you wrote '$ANSWER': not the world sizes at which the flag leaves the fingerprint as it is; look again at what it changes in the arithmetic (the page) and at Note [Gradients as bucket views]"
pass "the same fingerprint with and without the flag at world size(s) ${truth:-none} of 5, 6, 7 and 8"
