#!/usr/bin/env bash
# exercise: 06.2 A job with no warning
# kind: observation
# time: 10 min
# build: 06_slurm 05_ddp
# proves: the state you wrote down, predicted from Note [The simulated cluster] (the exercise gives
#         no command for this job), is the one the simulated Slurm gives a job that reaches its time
#         limit without a warning signal (--signal none): it is stopped, not requeued.
source "$(dirname "$0")/lib.sh"
read_answer 06.2
run 60 "$WORK/job.log" 06_slurm --local --nodes 1 --tasks-per-node 2 --time 0:08 --signal none --out-dir "$WORK/jobs" \
  --trainer "$B/05_ddp" -- --synthetic --train-samples 20000 --test-samples 64 --epochs 10000 --log-every 1000
truth=$(sed -n 's/.*job [0-9]* ended: \([A-Z_]*\) after.*/\1/p' "$WORK/job.log" | tail -n 1)
[ -n "$truth" ] || fail "the simulated job did not say how it ended: $(tail -n 3 "$WORK/job.log")"
[ "${ANSWER^^}" = "$truth" ] || fail "'$ANSWER' is not right; one word (in any case), Slurm's state: what does the simulator send at the limit when nothing warned the job, and which state does it give the job then (Note [The simulated cluster] in 06_slurm/local_cluster.cpp)?"
pass "$(sed -n 's/.*\(job [0-9]* ended: .*\)/\1/p' "$WORK/job.log" | tail -n 1)"
