#!/usr/bin/env bash
# exercise: 06.2 A job with no warning
# kind: observation
# time: 15 min
# build: 06_slurm 05_ddp
# proves: the two jobs you predicted from Note [The simulated cluster] and Note [Preemption and
#         requeue] (the exercise gives no command for them) start their tasks as many times, and
#         end in the states, that the simulated Slurm gives them: (a) warned, with one requeue
#         allowed; (b) never warned (--signal none).
source "$(dirname "$0")/lib.sh"
read_answer 06.2
job() {  # <name> <flags of the job>...: how many times its tasks started, and the state it ended in
  local name=$1
  shift
  run 90 "$WORK/$name.log" 06_slurm --local --nodes 1 --tasks-per-node 2 --time 0:08 "$@" --out-dir "$WORK/$name" \
    --trainer "$B/05_ddp" -- --synthetic --train-samples 20000 --test-samples 64 --epochs 10000 --log-every 1000
  local state
  state=$(sed -n 's/.*job [0-9]* ended: \([A-Z_]*\) after.*/\1/p' "$WORK/$name.log" | tail -n 1)
  [ -n "$state" ] || fail "the simulated job did not say how it ended: $(tail -n 3 "$WORK/$name.log")"
  echo "$(grep -cE '^\[slurm \(local\)\] job [0-9]+( \(restart [0-9]+\))? running: ' "$WORK/$name.log") $state"
}
a=$(job warned --signal USR2@4 --max-requeue 1) || exit 1
b=$(job unwarned --signal none) || exit 1
read -r a_starts a_state b_starts b_state extra <<< "$ANSWER"
[ -n "$b_state" ] && [ -z "$extra" ] && [[ $a_starts$b_starts =~ ^[0-9]+$ ]] ||
  fail "you wrote '$ANSWER'; write four words: 06.2: <starts of (a)> <state of (a)> <starts of (b)> <state of (b)>"
# One FAIL for any wrong answer: it never says which job, or which word, was right.
[ "$a_starts ${a_state^^} $b_starts ${b_state^^}" = "$a $b" ] ||
  fail "'$ANSWER' is not right: for each job, how many times its tasks start and Slurm's state at the end (one word, any case): what reaches each job before its limit, what the trainer does then, and how many requeues --max-requeue allows (Note [The simulated cluster] in 06_slurm/local_cluster.cpp, Note [Preemption and requeue])"
pass "(a) $(sed -n 's/.*\(job [0-9]* ended: .*\)/\1/p' "$WORK/warned.log" | tail -n 1); (b) $(sed -n 's/.*\(job [0-9]* ended: .*\)/\1/p' "$WORK/unwarned.log" | tail -n 1)"
