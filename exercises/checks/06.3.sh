#!/usr/bin/env bash
# exercise: 06.3 The wrong signal
# kind: observation
# time: 15 min
# build: 06_slurm 05_ddp
# proves: the state and the signal you wrote down, predicted (the exercise gives no command for
#         this job), are the state a job ends in when Slurm warns with SIGUSR2 but the trainer
#         listens for SIGUSR1 (--requeue-signal USR1), and the signal its tasks died of.
source "$(dirname "$0")/lib.sh"
read_answer 06.3
run 60 "$WORK/job.log" 06_slurm --local --nodes 1 --tasks-per-node 2 --time 0:10 --signal USR2@5 --out-dir "$WORK/jobs" \
  --trainer "$B/05_ddp" -- --synthetic --train-samples 20000 --test-samples 64 --epochs 10000 --log-every 1000 --requeue-signal USR1
truth=$(sed -n 's/.*job [0-9]* ended: \([A-Z_]*\) after.*/\1/p' "$WORK/job.log" | tail -n 1)
[ -n "$truth" ] || fail "the simulated job did not say how it ended: $(tail -n 3 "$WORK/job.log")"
# The signal a task died of, as the simulator names it ("ended with SIGUSR2 (...)"); none: it exited.
signal=$(sed -n 's/.*task [0-9]* (node .*) ended with SIG\([A-Z0-9]*\).*/\1/p' "$WORK/job.log" | head -n 1)
read -r state said <<<"$ANSWER"
state=${state^^}
said=${said^^}
said=${said#SIG}
[ -n "$state" ] && [ -n "$said" ] || fail "you wrote '$ANSWER'; write the state, then the signal: 06.3: <state> <signal>"
wrong_state="Slurm's state: which state does the simulator give a job whose tasks end as the signal you named ends them, and when (Note [The simulated cluster] in 06_slurm/local_cluster.cpp)?"
wrong_signal="the signal: which signals reach the tasks before the limit, and what does one do to a process that has no handler for it?"
# One FAIL for any wrong answer, naming both questions: it never says which half was right.
[ "$state" = "$truth" ] && [ "$said" = "$signal" ] || fail "'$state $said' is not right. $wrong_state And $wrong_signal"
pass "$(grep -o 'task [0-9]* (node .*) ended with .*' "$WORK/job.log" | head -n 1); job $(sed -n 's/.*job [0-9]* ended: \(.*\)/\1/p' "$WORK/job.log" | tail -n 1)"
