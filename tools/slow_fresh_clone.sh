#!/usr/bin/env bash
# slow_fresh_clone.sh: CI's run (.ci/run) on a fresh clone, on this machine made slower: every
# process of the run shares a CPU quota, so the run sees the throughput of a slower machine.
#
# Usage (as root, on a machine with nothing else running):
#   tools/slow_fresh_clone.sh [--share 0.91] [--commit HEAD] [--dir /tmp/slow_clone]
# --share: the CPU time the run gets, in cores (2 cores at 0.91: the 2 cores' work takes 2.2
# times as long, the ratio of the slower machines CI also gets).
# Prints the run's last lines (its phases and slowest tests) and exits with its code, and writes
# the run's time to results/slow_fresh_clone.json (scripts/results.sh), with the share and the commit.
#
# A quota slows compiling and testing alike, where a slower CPU slowed the tests 2.1-2.4 times
# and compiling 1.34-1.6 times: for the whole run it errs on the slow side. Sleeps and timeouts
# do not slow down, on a slower machine either. Run nothing else beside it: what else runs takes
# CPU from the run too, and the quota cannot give it back.
set -euo pipefail
share=0.91 commit=HEAD dir=/tmp/slow_clone
while [ $# -gt 0 ]; do
  case $1 in
    --share) share=$2; shift 2 ;;
    --commit) commit=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    *) echo "slow_fresh_clone.sh: unknown argument '$1' (--share, --commit, --dir)" >&2; exit 2 ;;
  esac
done
[[ $share =~ ^[0-9]*\.?[0-9]+$ ]] || { echo "slow_fresh_clone.sh: --share $share is not a number of cores" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "slow_fresh_clone.sh: needs root (a cgroup's CPU quota)" >&2; exit 2; }
root=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
period=100000
quota=$(awk -v s="$share" -v p=$period 'BEGIN { printf "%d", s * p }')
# cgroup v2 (cpu.max) or v1 (the cpu controller's cfs quota).
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
  echo +cpu > /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true
  cg=/sys/fs/cgroup/ddp_slow_clone
  mkdir -p "$cg"
  echo "$quota $period" > "$cg/cpu.max"
elif [ -d /sys/fs/cgroup/cpu ]; then
  cg=/sys/fs/cgroup/cpu/ddp_slow_clone
  mkdir -p "$cg"
  echo $period > "$cg/cpu.cfs_period_us"
  echo "$quota" > "$cg/cpu.cfs_quota_us"
else
  echo "slow_fresh_clone.sh: no cgroup CPU controller found under /sys/fs/cgroup" >&2
  exit 2
fi
rm -rf "$dir"
git clone -q "$root" "$dir"
git -C "$dir" checkout -q "$commit"
echo "slow_fresh_clone.sh: .ci/run of $(git -C "$dir" rev-parse --short HEAD) in $dir, on $share of a core's time in all ($cg)"
echo $$ > "$cg/cgroup.procs"
start=$SECONDS
rc=0
(cd "$dir" && .ci/run) > "$dir.log" 2>&1 || rc=$?
seconds=$((SECONDS - start))
echo "slow_fresh_clone.sh: exit $rc after $seconds s; the log: $dir.log"
source "$root/scripts/results.sh"
write_result slow_fresh_clone "tools/slow_fresh_clone.sh --share $share --commit $commit" \
  "\"share_cores\": $share, \"commit\": \"$(git -C "$dir" rev-parse --short HEAD)\", \"exit\": $rc, \"seconds\": $seconds"
tail -n 8 "$dir.log"
exit $rc
