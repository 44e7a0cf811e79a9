#!/usr/bin/env bash
# A background job's exit status outlives bash's memory of its pid (Note [A job's status in a
# file], scripts/progress.sh): test.sh's cuda build may end long before the cpu tests do, and by
# then its pid may be another process's. The status is the file's: job_status says how the job
# ended even once bash has reaped it and forgotten the pid (here: a second job_status, whose wait
# finds no child), and waits for a job still running.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/progress.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
check() { if [ "$2" = "$3" ]; then echo "ok: $1"; else echo "FAILED: $1: $2, not $3"; fail=1; fi; }

start_job "$dir/ended" bash -c 'exit 3'
pid=$!
rc=0; job_status "$dir/ended" "$pid" || rc=$?
check "job_status says how the job ended" "$rc" 3
rc=0; job_status "$dir/ended" "$pid" || rc=$?
check "and again, once bash has reaped the pid" "$rc" 3

start_job "$dir/running" bash -c 'sleep 1; exit 0'
pid=$!
check "a job still running has an empty status file" "$(cat "$dir/running" 2>/dev/null)" ""
rc=0; job_status "$dir/running" "$pid" || rc=$?
check "job_status waits for a running job and says 0" "$rc" 0

start_job "$dir/failed" false
pid=$!
rc=0; job_status "$dir/failed" "$pid" || rc=$?
check "a failed command's status" "$rc" 1
exit $fail
