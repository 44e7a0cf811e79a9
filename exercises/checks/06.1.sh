#!/usr/bin/env bash
# exercise: 06.1 Say which restart this is
# kind: coding
# time: 20 min
# build: 05_ddp 06_slurm
# proves: in a job that the simulated Slurm requeued (a preemption drill after step 4), the
#         trainer's restarted run reads SLURM_RESTART_COUNT and the job id that Slurm set, and says
#         from which step it continues, the step the preempted run checkpointed; the first run,
#         where Slurm leaves SLURM_RESTART_COUNT unset, says nothing of the kind, nor does a
#         resume outside Slurm; a resume with SLURM_RESTART_COUNT=2 says restart 2.
source "$(dirname "$0")/lib.sh"
run 120 "$WORK/job.log" 06_slurm --local --nodes 1 --tasks-per-node 2 --out-dir "$WORK/jobs" --trainer "$B/05_ddp" -- \
  --synthetic --train-samples 2048 --test-samples 64 --max-steps 12 --expect-accuracy 0 --drill-at-step 4 ||
  fail "the simulated job failed: $(tail -n 3 "$WORK/job.log")"
# What Slurm (simulated) and the course itself say: the job id, the restart count, the step.
job=$(sed -n 's/.*\] job \([0-9]*\) requeued: starting again .*SLURM_RESTART_COUNT=\([0-9]*\)$/\1/p' "$WORK/job.log" | head -n 1)
restart=$(sed -n 's/.*requeued: starting again .*SLURM_RESTART_COUNT=\([0-9]*\)$/\1/p' "$WORK/job.log" | head -n 1)
stopped=$(sed -n 's/^\[rank 0\/2\] preempted: .* stopped after step \([0-9]*\) .*/\1/p' "$WORK/job.log" | head -n 1)
[ -n "$job" ] && [ -n "$restart" ] && [ -n "$stopped" ] || fail "the job was not preempted and requeued as it should be: $(tail -n 3 "$WORK/job.log")"
grep -q '^\[rank 0/2\] requeued: ' "$WORK/job.log" ||
  fail "the restarted run printed no line 'requeued: restart <n> of Slurm job <id>, resuming at step <step>': in step 4 of 05_ddp/main.cpp, after checkpoints.resume_or_reset(), read SLURM_RESTART_COUNT and SLURM_JOB_ID (std::getenv) and log it with ddp::log0"
[ "$(grep -c '^\[rank 0/2\] requeued: ' "$WORK/job.log")" = 1 ] ||
  fail "rank 0 printed 'requeued: ...' $(grep -c '^\[rank 0/2\] requeued: ' "$WORK/job.log") times; once is right: in the run after the requeue"
# The line must come from the restarted run: after the simulator's "(restart 1) running".
after=$(sed -n '/(restart [0-9]*) running/,$p' "$WORK/job.log" | grep '^\[rank 0/2\] requeued: ')
[ -n "$after" ] || fail "the 'requeued:' line came from the job's first run, where SLURM_RESTART_COUNT is unset: print it only when it is set (and above 0)"
line=${after#\[rank 0/2\] }
[[ $line =~ ^requeued:\ restart\ ([0-9]+)\ of\ Slurm\ job\ ([0-9]+),\ resuming\ at\ step\ ([0-9]+)$ ]] ||
  fail "the line '$line' is not 'requeued: restart <n> of Slurm job <id>, resuming at step <step>'"
[ "${BASH_REMATCH[1]}" = "$restart" ] || fail "your line says restart ${BASH_REMATCH[1]}; Slurm set SLURM_RESTART_COUNT=$restart"
[ "${BASH_REMATCH[2]}" = "$job" ] || fail "your line says job ${BASH_REMATCH[2]}; the job is $job (SLURM_JOB_ID)"
[ "${BASH_REMATCH[3]}" = "$stopped" ] || fail "your line says step ${BASH_REMATCH[3]}; the preempted run stopped after step $stopped, and the resumed run goes on from there (the step checkpoints.resume_or_reset() returns)"
grep -q "job $job ended: COMPLETED" "$WORK/job.log" || fail "the job did not complete: $(tail -n 2 "$WORK/job.log")"
# A resume outside Slurm says nothing of a requeue; a resume whose count Slurm set to 2 says 2.
unset SLURM_JOB_ID SLURM_RESTART_COUNT
plain=(--nproc-per-node 2 --synthetic --train-samples 512 --test-samples 64 --expect-accuracy 0 --out "$WORK/plain")
run 90 "$WORK/plain1.log" 05_ddp "${plain[@]}" --max-steps 2 --reset || fail "05_ddp failed: $(tail -n 3 "$WORK/plain1.log")"
run 90 "$WORK/plain2.log" 05_ddp "${plain[@]}" --max-steps 3 || fail "05_ddp failed on resuming: $(tail -n 3 "$WORK/plain2.log")"
! grep -q '^\[rank 0/2\] requeued: ' "$WORK/plain2.log" ||
  fail "a run resumed outside Slurm (SLURM_RESTART_COUNT unset) printed '$(grep -m 1 'requeued: ' "$WORK/plain2.log")': print it only when Slurm set the count"
id=$((RANDOM % 9000 + 1000))
SLURM_JOB_ID=$id SLURM_RESTART_COUNT=2 run 90 "$WORK/plain3.log" 05_ddp "${plain[@]}" --max-steps 4 ||
  fail "05_ddp failed on resuming: $(tail -n 3 "$WORK/plain3.log")"
grep -q "^\[rank 0/2\] requeued: restart 2 of Slurm job $id, resuming at step 3\$" "$WORK/plain3.log" ||
  fail "with SLURM_RESTART_COUNT=2 and SLURM_JOB_ID=$id, resuming at step 3, rank 0 printed '$(grep -m 1 'requeued: ' "$WORK/plain3.log")': read both from the environment"
pass "$line; the job then completed"
