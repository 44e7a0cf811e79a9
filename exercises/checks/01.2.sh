#!/usr/bin/env bash
# exercise: 01.2 A broadcast from rank 0
# kind: coding
# time: 20 min
# build: 01_join_group
# trusts: common/group/collective_count.cpp common/group/collective_count.h
# proves: every rank of a world of 3, each started as its own process, received through a
#         broadcast the number only rank 0 knows (its process id), and the group still passed its
#         check. The backend counts what each rank ran (Note [Counted by the backend]): one
#         broadcast beside the chapter's one all-reduce, and what rank 0's broadcast sent, so the
#         store or an all-reduce will not do, nor a broadcast of something else beside them.
source "$(dirname "$0")/lib.sh"
[ -x "$B/01_join_group" ] || fail "$B/01_join_group not found: build the course first (scripts/run.sh)"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# Started directly (not through `run`): $! is then the rank's own process id, the number rank 0
# must broadcast. The ranks stop by themselves within --timeout; the watchdog is for a hang.
for r in 0 1 2; do
  # A few short processes between two ranks: their process ids do not follow from each other's.
  for _ in $(seq $((RANDOM % 12))); do /bin/true; done
  DDP_COUNT_COLLECTIVES=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$B/01_join_group" --rank "$r" --world-size 3 --timeout 20 > "$WORK/rank$r.log" 2>&1 &
  pids[$r]=$!
done
# (Its output goes nowhere: a sleep left holding the check's stdout would hold up whoever reads it.)
(sleep 60; kill -9 "${pids[@]}" 2> /dev/null) > /dev/null 2>&1 &
watchdog=$!
for r in 0 1 2; do wait "${pids[$r]}"; codes[$r]=$?; done
pkill -P "$watchdog" sleep 2> /dev/null; kill "$watchdog" 2> /dev/null
for r in 0 1 2; do
  [ "${codes[$r]}" = 0 ] || fail "rank $r exited ${codes[$r]}: $(tail -n 2 "$WORK/rank$r.log")"
done
for r in 0 1 2; do
  got=$(sed -n "s/^\[rank $r\/3\] broadcast from rank 0: \([0-9]*\)\$/\1/p" "$WORK/rank$r.log")
  [ -n "$got" ] || fail "rank $r printed no line 'broadcast from rank 0: <number>': add the broadcast after step 6 of 01_join_group/main.cpp (log it with ddp::log)"
  [ "$got" = "${pids[0]}" ] || fail "rank $r got $got, but rank 0's process id was ${pids[0]}"
  backend_count "$WORK/rank$r.log" "$r/3"
  [ -n "$COUNT" ] || fail "rank $r did not say, when it left, what its process group ran (DDP_COUNT_COLLECTIVES): did it leave the group as the chapter does (step 8)?"
  read -r _ allreduces allreduce_bytes _ _ broadcasts <<< "$COUNT"
  [ "$broadcasts" = 1 ] || fail "rank $r's process group ran $broadcasts broadcasts, not one: send the number with group.pg->broadcast, once"
  [ "$allreduces" = 1 ] && [ "$allreduce_bytes" = 8 ] ||
    fail "rank $r's process group ran $allreduces all-reduces of $allreduce_bytes bytes where the chapter runs one of 8 (its rank, one float64): the number goes by the broadcast alone"
done
# What rank 0's broadcast carried, as its backend saw it go (a broadcast of a placeholder beside
# another route counts one broadcast all the same).
sent=$(sed -n "s/^\[rank 0\/3\] as the root of its broadcasts this rank sent: \(.*\) (DDP_COUNT_COLLECTIVES)\$/\1/p" "$WORK/rank0.log")
[ "$(grep -c "as the root of its broadcasts.*(DDP_COUNT_COLLECTIVES)" "$WORK/rank0.log")" = 1 ] && [ "$sent" = "${pids[0]}" ] ||
  fail "rank 0's broadcast sent '${sent:-nothing}', not its process id ${pids[0]}: the number must travel by the broadcast itself"
pass "ranks 0, 1 and 2 all got ${pids[0]}, rank 0's process id"
