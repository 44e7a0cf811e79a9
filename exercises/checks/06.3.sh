#!/usr/bin/env bash
# exercise: 06.3 The wrong signal
# kind: observation
# time: 15 min
# build: 06_slurm 05_ddp
# proves: the state you wrote down, predicted (the exercise gives no command for this job), is the
#         one a job ends in when Slurm warns with SIGUSR2 but the trainer listens for SIGUSR1
#         (--requeue-signal USR1): the warning kills the tasks, as any signal nobody handles does,
#         and nothing is checkpointed or requeued.
source "$(dirname "$0")/lib.sh"
read_answer 06.3
run 60 "$WORK/job.log" 06_slurm --local --nodes 1 --tasks-per-node 2 --time 0:10 --signal USR2@5 --out-dir "$WORK/jobs" \
  --trainer "$B/05_ddp" -- --synthetic --train-samples 20000 --test-samples 64 --epochs 10000 --log-every 1000 --requeue-signal USR1
truth=$(sed -n 's/.*job [0-9]* ended: \([A-Z_]*\) after.*/\1/p' "$WORK/job.log" | tail -n 1)
[ -n "$truth" ] || fail "the simulated job did not say how it ended: $(tail -n 3 "$WORK/job.log")"
[ "$ANSWER" = "$truth" ] || fail "you wrote '$ANSWER'; one word, Slurm's state: what does SIGUSR2 do to a process that has no handler for it, before the limit comes, and which state does the simulator give a job whose tasks end so (Note [The simulated cluster] in 06_slurm/local_cluster.cpp)?"
pass "$(grep -o 'task [0-9]* (node .*) ended with .*' "$WORK/job.log" | head -n 1); job $(sed -n 's/.*job [0-9]* ended: \(.*\)/\1/p' "$WORK/job.log" | tail -n 1)"
