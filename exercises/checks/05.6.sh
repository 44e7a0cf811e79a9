#!/usr/bin/env bash
# exercise: 05.6 Who sits out, whose model wins
# kind: observation
# time: 15 min
# build: 05_ddp 02_spawn
# proves: the numbers you wrote down are, for 481 images over 3 ranks with --uneven-shards --join
#         (the exercise runs 2018 and gives no command for 481), the ranks that ran out of data at
#         the epoch's end and the rank whose model every rank took (the highest of those that
#         trained the last step: Note [Uneven inputs and Join]).
source "$(dirname "$0")/lib.sh"
read_answer 05.6
run 120 "$WORK/join.log" 05_ddp --nproc-per-node 3 --synthetic --train-samples 481 --batch-size 32 --max-steps 6 --test-samples 64 \
  --expect-accuracy 0 --uneven-shards --join --out "$WORK/join" --reset ||
  fail "05_ddp failed: $(tail -n 3 "$WORK/join.log")"
out=$(grep -o '^\[rank [0-9]*/3\] out of data' "$WORK/join.log" | sed 's/^\[rank \([0-9]*\).*/\1/' | sort -u | tr '\n' ' ')
src=$(last_match 'every rank takes the model of rank' "$WORK/join.log" | sed -n 's/.*takes the model of rank \([0-9]*\).*/\1/p')
[ -n "$src" ] && [ -n "$out" ] || fail "05_ddp printed no Join lines: $(tail -n 3 "$WORK/join.log")"
# The ranks that sit out are a set: written in any order, compared in ascending order.
read -r -a written <<< "$ANSWER"
if [ "${#written[@]}" -ge 2 ] && [[ $(echo $ANSWER) =~ ^[0-9]+( [0-9]+)+$ ]]; then
  ANSWER="$(printf '%s\n' "${written[@]:0:${#written[@]}-1}" | sort -n | tr '\n' ' ')${written[-1]}"
fi
check_two_parts "for 481 images over 3 ranks the ranks that run out of data, then the rank whose model every rank takes (numbers with a space between)" \
  "the ranks that run out of data" "${out% }" "the last number, the rank whose model every rank takes" "$src"

pass "ranks ${out% } sat out the last step; every rank took rank $src's model"
