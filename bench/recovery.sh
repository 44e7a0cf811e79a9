#!/usr/bin/env bash
# How long a lost replica costs, on this machine, three ways (docs/recovery.md):
#   chapter 08: from the kill to the survivor's next committed step: replica 1 SIGKILLed at the
#     start of step 8, before it asks for that step's quorum (torchft's fault below); and what a
#     recovery is made of (detection, quorum, new group, healing, the step) for a SIGKILL inside
#     the all-reduce and for a SIGSTOP (nothing closes: found at --timeout, 2 s);
#   torchft 0.2.0 itself on the same task (tests/torchft_reference.py), replica 1 exiting at the
#     start of step 8, before it asks for that step's quorum, with its default heartbeat timeout
#     (5000 ms) and with ours (1000 ms); only where the cuda flavour's virtualenv has torchft,
#     else left out, saying so;
#   what chapter 08 adds to every step (its question to the lighthouse and its vote): 08's step
#     without a fault, from the commit times in its step log (440 steps: the mean from the first
#     commit to the last), against 03's, from 03 run for 440 steps and for 40 (what a run pays
#     once, starting, cancels): 08's step - (03 at 440 - 03 at 40) / 400;
#   chapter 05's restart: 05_ddp with --max-restarts 1 and a checkpoint every step (nothing to
#     redo), rank 1 killed at step 8, against the same run without the kill: the difference is
#     what the restart cost (a start, the resume).
# Each measured --repeats times (default 3); the result file holds every run and the median.
# Usage: bench/recovery.sh [--repeats N] [output folder, default runs/recovery]
# Writes results/recovery.json (scripts/results.sh: DDP_RECORD_RESULTS=1 for the course's own).
set -euo pipefail
export DDP_GPU_COUNT=0
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/stop.sh"  # Ctrl-C: this script and every run it started stop (Note [Stop means stop])
source "$root/scripts/kernels.sh"
repeats=3
if [ "${1:-}" = --repeats ]; then repeats=$2; shift 2; fi
[[ $repeats =~ ^[1-9][0-9]*$ ]] || { echo "--repeats: a whole number from 1, not '$repeats'" >&2; exit 2; }
out=${1:-runs/recovery}
if [ -n "${DDP_BUILD_DIR:-}" ]; then
  bin=$DDP_BUILD_DIR
else
  "$root/scripts/build.sh" cpu 02_spawn 03_manual_allreduce 05_ddp 08_fault_tolerance > /dev/null
  bin=$root/build-cpu
fi
rm -rf "$out" && mkdir -p "$out"
out=$(cd "$out" && pwd)
source "$root/scripts/results.sh"

# "from the fault ... : T s = detection D s + quorum Q s + new group G s + healing H s + the step S s" -> JSON
breakdown() {
  sed -n 's/.*to the next committed step on [^:]*: \([0-9.]*\)s = detection \([0-9.]*\)s + quorum \([0-9.]*\)s + new group \([0-9.]*\)s + healing \([0-9.]*\)s + the step \([0-9.]*\)s.*/{"total_s": \1, "detection_s": \2, "quorum_s": \3, "group_s": \4, "healing_s": \5, "step_s": \6}/p' "$1" | head -n 1
}
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f", b - a }'; }  # seconds since a date +%s.%N
runs_question="" runs_lost="" runs_kill="" runs_stop="" runs_tf5="" runs_tf1="" runs_restart=""
venv_python=$root/.venv/bin/python
have_torchft=$([ -x "$venv_python" ] && "$venv_python" -c "import torchft" 2>/dev/null && echo yes || echo no)
for k in $(seq 1 "$repeats"); do
  echo "== round $k of $repeats"
  "$bin/08_fault_tolerance" --replicas 2 --inject r1:quorum@8 --steps 40 --save-init "$out/init$k.pt" --out "$out/lost$k" > "$out/lost$k.log" 2>&1
  t=$(sed -n 's/.*to the next committed step on r0: \([0-9.]*\)s (no step failed.*/\1/p' "$out/lost$k.log")
  [ -n "$t" ] || { echo "08's run with r1 lost before its quorum said no time: $out/lost$k.log" >&2; exit 1; }
  runs_lost+="${runs_lost:+, }$t"
  "$bin/08_fault_tolerance" --replicas 2 --inject r1:allreduce@8 --steps 40 --out "$out/kill$k" > "$out/kill$k.log" 2>&1
  runs_kill+="${runs_kill:+, }$(breakdown "$out/kill$k.log")"
  "$bin/08_fault_tolerance" --replicas 2 --inject r1:stop@8 --steps 40 --timeout 2 --out "$out/stop$k" > "$out/stop$k.log" 2>&1
  runs_stop+="${runs_stop:+, }$(breakdown "$out/stop$k.log")"
  if [ "$have_torchft" = yes ]; then
    # The same fault for torchft: replica 1 gone at the start of step 8 (08's run's parameters to compare with).
    for hb in 5000 1000; do
      "$venv_python" "$root/tests/torchft_reference.py" --init "$out/init$k.pt" --compare "$out/lost$k/params.r0.pt" --steps 40 \
        --kill-at 8 --heartbeat-timeout-ms $hb --tolerance 1 > "$out/torchft$hb-$k.log" 2>&1
      t=$(sed -n 's/^torchft: from the kill to replica 0.s step 8 committed: \([0-9.]*\)s.*/\1/p' "$out/torchft$hb-$k.log")
      [ "$hb" = 5000 ] && runs_tf5+="${runs_tf5:+, }$t" || runs_tf1+="${runs_tf1:+, }$t"
    done
  fi
  # What every step pays: 08 without a fault (its step from its step log's commit times) against
  # 03 (the same step, one group for the whole run) at 440 and at 40 steps.
  "$bin/08_fault_tolerance" --replicas 2 --steps 440 --out "$out/plain08-$k" > "$out/plain08-$k.log" 2>&1
  step08=$(awk '$1 == "committed" { t[n++] = $4 } END { printf "%.5f", (t[n-1] - t[0]) / (n - 1) }' "$out/plain08-$k/steps.r0.txt")
  for n in 440 40; do
    s=$(date +%s.%N); "$bin/02_spawn" --nproc-per-node 2 -- "$bin/03_manual_allreduce" --steps $n > "$out/plain03-$n-$k.log" 2>&1
    eval "t03_$n=$(since "$s")"
  done
  step03=$(awk -v c="$t03_440" -v d="$t03_40" 'BEGIN { printf "%.5f", (c - d) / 400 }')
  per=$(awk -v a="$step08" -v b="$step03" 'BEGIN { printf "%.4f", a - b }')
  runs_question+="${runs_question:+, }{\"ch08_step_s\": $step08, \"ch03_step_s\": $step03, \"per_step_s\": $per}"
  # 05: the same short run, with and without rank 1 killed at step 8 and restarted.
  common=(--nproc-per-node 2 --synthetic --train-samples 2048 --global-batch 64 --max-steps 40 --ckpt-every 1 --log-every 100)
  s=$(date +%s.%N); "$bin/05_ddp" "${common[@]}" --out "$out/plain$k" --reset > "$out/plain$k.log" 2>&1; plain=$(since "$s")
  s=$(date +%s.%N); "$bin/05_ddp" "${common[@]}" --max-restarts 1 --kill-rank 1 --kill-at-step 8 --out "$out/restart$k" --reset > "$out/restart$k.log" 2>&1
  restarted=$(since "$s")
  grep -q "restarting all 2 workers" "$out/restart$k.log" || { echo "05's run did not restart: $out/restart$k.log" >&2; exit 1; }
  runs_restart+="${runs_restart:+, }{\"plain_s\": $plain, \"with_restart_s\": $restarted, \"restart_cost_s\": $(awk -v a="$restarted" -v b="$plain" 'BEGIN { printf "%.3f", a - b }')}"
done
median() { python3 -c 'import json,statistics,sys; v=json.loads(sys.argv[1]); k=sys.argv[2]; print(round(statistics.median([x[k] if k else x for x in v]), 3))' "[$1]" "${2:-}"; }
members="\"repeats\": $repeats"
members+=", \"ch08_lost_before_quorum\": {\"runs_s\": [$runs_lost], \"median_s\": $(median "$runs_lost")}"
members+=", \"ch08_kill\": {\"runs\": [$runs_kill], \"median_total_s\": $(median "$runs_kill" total_s), \"median_detection_s\": $(median "$runs_kill" detection_s), \"median_quorum_s\": $(median "$runs_kill" quorum_s), \"median_group_s\": $(median "$runs_kill" group_s)}"
members+=", \"ch08_stop\": {\"runs\": [$runs_stop], \"median_total_s\": $(median "$runs_stop" total_s), \"median_detection_s\": $(median "$runs_stop" detection_s)}"
if [ "$have_torchft" = yes ]; then
  members+=", \"torchft_heartbeat_5000ms\": {\"runs_s\": [$runs_tf5], \"median_s\": $(median "$runs_tf5")}"
  members+=", \"torchft_heartbeat_1000ms\": {\"runs_s\": [$runs_tf1], \"median_s\": $(median "$runs_tf1")}"
else
  members+=", \"torchft\": \"not measured: no torchft in .venv (scripts/setup.sh cuda installs it)\""
fi
members+=", \"ch08_question\": {\"runs\": [$runs_question], \"median_per_step_s\": $(median "$runs_question" per_step_s)}"
members+=", \"ch05_restart\": {\"runs\": [$runs_restart], \"median_restart_cost_s\": $(median "$runs_restart" restart_cost_s)}"
write_result recovery "bench/recovery.sh --repeats $repeats" "$members"
cat "${DDP_RESULTS_DIR:-$([ "${DDP_RECORD_RESULTS:-}" = 1 ] && echo "$root/results" || echo "${TMPDIR:-/tmp}/ddp-results")}/recovery.json"
