#!/usr/bin/env bash
# exercise: 07.2 How many ranks for a memory budget
# kind: observation
# time: 20 min
# build: 07_fsdp 02_spawn
# proves: the two world sizes you wrote are, for the MLP with SGD and with AdamW, the smallest at
#         which every rank trains under --memory-limit-mb 5.3: the check trains at each (every
#         rank must finish) and at one rank fewer (a rank must run out of memory), now. Then the
#         page's margin: the answer trains at 5.2 MiB too and one rank fewer runs out at 5.4 too
#         (0.1 MiB each side, with peaks the same from run to run: a right answer always passes).
source "$(dirname "$0")/lib.sh"
read_answer 07.2
answer=$(echo $ANSWER)
[[ $answer =~ ^[1-6]\ [1-6]$ ]] ||
  fail "you wrote '$ANSWER'; write two world sizes from 1 to 6, SGD's first, then AdamW's: '07.2: <sgd> <adamw>'"
# budget <optimizer> <world size>: trains the MLP at that world size under the budget; sets
# OUT_OF_MEMORY to a rank's out-of-memory line when one ran out; returns 0 when every rank trained.
budget() {  # <optimizer> <world size> [limit, default the page's 5.3]
  local log="$WORK/$1-$2-${3:-5.3}.log"
  OUT_OF_MEMORY=
  run 90 "$log" 07_fsdp --nproc-per-node "$2" --optimizer "$1" --memory-limit-mb "${3:-5.3}" --max-steps 3 --train-samples 1024 \
    --test-samples 256 --expect-accuracy 0 --out "$WORK/$1-$2-${3:-5.3}" --reset && return 0
  OUT_OF_MEMORY=$(grep -m 1 -o 'out of memory (--memory-limit-mb[^)]*): tried to allocate .* already held' "$log")
  [ -n "$OUT_OF_MEMORY" ] || fail "07_fsdp --nproc-per-node $2 --optimizer $1 --memory-limit-mb 5.3 failed, and not for memory: $(tail -n 3 "$log")"
  return 1
}
right=yes
part() {  # <optimizer> <world size>: right when it trains there and not at one rank fewer
  budget "$1" "$2" && { [ "$2" = 1 ] || ! budget "$1" $(($2 - 1)); } || right=no
}
part sgd "${answer% *}"
part adamw "${answer#* }"
# One FAIL for any wrong answer: it never says which half was right (halves are guessed, not
# worked out). The peaks are the same to the byte from run to run, so a right answer never fails.
[ $right = yes ] ||
  fail "'$answer' is not right: SGD's smallest world size, then AdamW's. Each rank's peak is a part that 1/N divides and a part that it does not (Note [What each rank holds] in 07_fsdp/memory_report.h): read both from two runs"
# The page's promise that a right answer passes every time: the peaks are the same from run to
# run, and 0.1 MiB from the budget on each side of the answer (the answer trains at 5.2 MiB too,
# and one rank fewer runs out at 5.4 too). A course that breaks it fails here, not the student.
for opt_n in "sgd ${answer% *}" "adamw ${answer#* }"; do
  read -r opt n <<< "$opt_n"
  budget "$opt" "$n" 5.2 || fail "the course's promise broke: the MLP with $opt at $n ranks runs out at 5.2 MiB (07_fsdp/README.md promises 0.1 MiB of margin)"
  [ "$n" = 1 ] || ! budget "$opt" $((n - 1)) 5.4 ||
    fail "the course's promise broke: the MLP with $opt at $((n - 1)) ranks trains at 5.4 MiB (07_fsdp/README.md promises 0.1 MiB of margin)"
done
pass "under 5.3 MiB a rank, the MLP trains from ${answer% *} ranks with SGD and from ${answer#* } with AdamW, not at one rank fewer"
