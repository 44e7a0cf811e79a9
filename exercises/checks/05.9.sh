#!/usr/bin/env bash
# exercise: 05.9 The best bucket for a cluster you do not have
# kind: observation
# time: 15 min
# build: ddp_sim
# proves: the cap you wrote down is the one of 1, 5, 10, 25, 50, 100 and 200 MiB at which ddp_sim,
#         run here for ResNet-101 on 128 x 8 V100s (--preset dgx-v100, 162 ms of compute), gives
#         the shortest step, and the step you wrote is that step to 0.1 ms: the simulator's sweep,
#         computed now, not a stored figure. A FAIL names no step time (with seven caps to try,
#         one would give the answer away); the step you write is what ddp_sim printed you.
source "$(dirname "$0")/lib.sh"
read_answer 05.9
answer=$(echo $ANSWER | sed 's/ *[Mm][Ii][Bb]//')  # "7 123.4", "7 MiB 123.4" are one answer
[[ $answer =~ ^([0-9]+)\ ([0-9]+(\.[0-9]+)?)( ?ms)?$ ]] ||
  fail "you wrote '$ANSWER'; write the cap in MiB, then the step ddp_sim gives at it in ms: e.g. 7 123.4 (not the answer)"
answer=${BASH_REMATCH[1]} step=${BASH_REMATCH[2]}
best= best_ms= steps=() mine=
for cap in 1 5 10 25 50 100 200; do
  run 30 "$WORK/cap-$cap.log" ddp_sim --profiles-dir "$ROOT/bench/profiles" --model resnet101 --preset dgx-v100 --compute-ms 162 \
    --nodes 128 --gpus-per-node 8 --bucket-cap-mb "$cap" || fail "ddp_sim failed: $(tail -n 3 "$WORK/cap-$cap.log")"
  ms=$(sed -n 's/^step: \([0-9.]*\) ms$/\1/p' "$WORK/cap-$cap.log")
  [ -n "$ms" ] || fail "ddp_sim printed no step: $(tail -n 3 "$WORK/cap-$cap.log")"
  steps+=("$cap MiB $ms ms")
  [ "$cap" = "$answer" ] && mine=$ms
  if [ -z "$best" ] || awk -v a="$ms" -v b="$best_ms" 'BEGIN { exit !(a < b) }'; then best=$cap best_ms=$ms; fi
done
[ "$answer" = "$best" ] && awk -v a="$step" -v b="$best_ms" 'BEGIN { d = a - b; exit !(d <= 0.1 && d >= -0.1) }' ||
  fail "'$ANSWER' is not the shortest step of the seven caps with its time. Run ddp_sim --model resnet101 --preset dgx-v100 --compute-ms 162 --nodes 128 --gpus-per-node 8 --bucket-cap-mb CAP (add --timeline) at each cap: how many buckets, and when does the first one start?"
pass "$best MiB: a step of $best_ms ms"
