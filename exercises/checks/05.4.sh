#!/usr/bin/env bash
# exercise: 05.4 Gradients stored once
# kind: observation
# time: 10 min
# build: 05_ddp 02_spawn
# proves: the two counts you wrote, worked out from what --gradient-as-bucket-view changes in
#         which step (the exercise gives no command for these runs), are those of the world sizes
#         5, 6, 7 and 8 at which the MLP ends 1 step, and 3 steps, with the same fingerprint with
#         the flag as without it (two real runs at each size and length).
source "$(dirname "$0")/lib.sh"
read_answer 05.4
# same_at <steps>: sets SAME to how many of the world sizes 5 to 8 end <steps> steps with one
# fingerprint, flag or not.
same_at() {
  local steps=$1 world mode flag copies views
  SAME=0
  for world in 5 6 7 8; do
    for mode in copies views; do
      flag=$([ "$mode" = views ] && echo --gradient-as-bucket-view)
      run 120 "$WORK/$mode-$world-$steps.log" 05_ddp --nproc-per-node $world --synthetic --train-samples 512 --test-samples 64 \
        --max-steps "$steps" --expect-accuracy 0 --out "$WORK/$mode-$world-$steps" --reset $flag ||
        fail "05_ddp failed at world size $world: $(tail -n 3 "$WORK/$mode-$world-$steps.log")"
    done
    copies=$(fingerprint "$WORK/copies-$world-$steps.log" 0/$world) views=$(fingerprint "$WORK/views-$world-$steps.log" 0/$world)
    [ -n "$copies" ] && [ -n "$views" ] ||
      fail "05_ddp printed no params fingerprint at world size $world: $(tail -n 3 "$WORK/views-$world-$steps.log")"
    [ "$copies" = "$views" ] && SAME=$((SAME + 1))
  done
}
[[ $(echo $ANSWER) =~ ^[0-4]\ [0-4]$ ]] || fail "you wrote '$ANSWER'; write two counts from 0 to 4, the 1-step count first: '05.4: <after 1> <after 3>'"
same_at 1
after1=$SAME
same_at 3
after3=$SAME
check_two_parts "two counts: '05.4: <after 1> <after 3>'" "after 1 step" "$after1" "after 3 steps" "$after3" \
  "look again at what the flag changes in the arithmetic, and from which step on (the page, and Note [Gradients as bucket views])"
pass "of the world sizes 5, 6, 7 and 8, $after1 end 1 step and $after3 end 3 steps with the same fingerprint with the flag as without it"
