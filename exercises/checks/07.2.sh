#!/usr/bin/env bash
# exercise: 07.2 How many ranks for a memory budget
# kind: observation
# time: 20 min
# build: 07_fsdp 02_spawn
# proves: the two world sizes you wrote are, for the MLP with SGD and with AdamW, the smallest at
#         which every rank trains under --memory-limit-mb 5.3: the check trains at each (every
#         rank must finish) and at one rank fewer (a rank must run out of memory), now.
source "$(dirname "$0")/lib.sh"
read_answer 07.2
answer=$(echo $ANSWER)
[[ $answer =~ ^[1-6]\ [1-6]$ ]] ||
  fail "you wrote '$ANSWER'; write two world sizes from 1 to 6, SGD's first, then AdamW's: '07.2: <sgd> <adamw>'"
# budget <optimizer> <world size>: trains the MLP at that world size under the budget; sets
# OUT_OF_MEMORY to a rank's out-of-memory line when one ran out; returns 0 when every rank trained.
budget() {
  local log="$WORK/$1-$2.log"
  OUT_OF_MEMORY=
  run 90 "$log" 07_fsdp --nproc-per-node "$2" --optimizer "$1" --memory-limit-mb 5.3 --max-steps 3 --train-samples 1024 \
    --test-samples 256 --expect-accuracy 0 --out "$WORK/$1-$2" --reset && return 0
  OUT_OF_MEMORY=$(grep -m 1 -o 'out of memory (--memory-limit-mb[^)]*): tried to allocate .* already held' "$log")
  [ -n "$OUT_OF_MEMORY" ] || fail "07_fsdp --nproc-per-node $2 --optimizer $1 --memory-limit-mb 5.3 failed, and not for memory: $(tail -n 3 "$log")"
  return 1
}
wrong=()
part() {
  local name=$1 optimizer=$2 n=$3
  if ! budget "$optimizer" "$n"; then
    wrong+=("the MLP with $name at $n ranks runs out ($OUT_OF_MEMORY)")
  elif [ "$n" -gt 1 ] && budget "$optimizer" $((n - 1)); then
    wrong+=("the MLP with $name trains at $((n - 1)) ranks too: $n is not the smallest")
  fi
}
part SGD sgd "${answer% *}"
part AdamW adamw "${answer#* }"
[ ${#wrong[@]} = 0 ] ||
  fail "wrong: $(IFS=';'; echo "${wrong[*]}" | sed 's/;/; and /'). Each rank's peak is a part that 1/N divides and a part that it does not (Note [What each rank holds] in 07_fsdp/memory_report.h): read both from two runs"
pass "under 5.3 MiB a rank, the MLP trains from ${answer% *} ranks with SGD and from ${answer#* } with AdamW, not at one rank fewer"
