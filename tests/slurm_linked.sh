#!/usr/bin/env bash
# The real-Slurm tests of 06 once more, on a second local Slurm whose nodes are hosts on shaped
# links (scripts/local_slurm.sh with DDP_SLURM_LINK, Note [Nodes as hosts]): 06_slurm/cpu_gloo.sbatch
# on 2 nodes x 2 tasks, and the preemption that requeues and resumes. Run by ctest (label slurm).
# Usage: tests/slurm_linked.sh <ddp_tests binary>. Exit 77 (ctest: skipped) without root or namespaces.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tests=${1:?usage: tests/slurm_linked.sh <ddp_tests binary>}
export DDP_SLURM_DIR=/tmp/ddp-slurm-linked DDP_SLURM_LINK=1gbit
if [ "$(id -u)" != 0 ]; then echo "[  SKIPPED ] needs root: a local Slurm whose nodes have network namespaces"; exit 77; fi
"$root/scripts/local_slurm.sh" down > /dev/null 2>&1 || true  # one left by a killed run
trap '"$root/scripts/local_slurm.sh" down > /dev/null 2>&1 || true' EXIT
set +e
why=$("$root/scripts/local_slurm.sh" up 2>&1)
code=$?
set -e
echo "$why"
[ $code = 3 ] && { echo "[  SKIPPED ] no namespaced local Slurm: $why"; exit 77; }
[ $code = 0 ] || { echo "FAILED: the namespaced local Slurm did not come up"; exit 1; }
eval "$("$root/scripts/local_slurm.sh" env)"

# The nodes are hosts: each task sees its node's name resolve to the node's own address.
seen=$(timeout 60 srun -N 2 -n 2 sh -c 'echo "$(hostname) $(getent hosts "$(hostname)" | cut -d" " -f1)"' | sort)
echo "srun -N 2 -n 2: $seen"
[ "$seen" = "$(printf 'node1 10.0.1.1\nnode2 10.0.1.2')" ] || { echo "FAILED: expected node1 10.0.1.1 and node2 10.0.1.2"; exit 1; }

# ... and their links are shaped: each node's side carries tbf at the rate (the bridge's side too).
for i in 1 2; do
  qdisc=$(nsenter -t "$(cat "$DDP_SLURM_DIR/run/slurmd-node$i.pid")" -n tc qdisc show dev eth0)
  [[ $qdisc == *"tbf"*"rate 1Gbit"* ]] || { echo "FAILED: node$i's link is not shaped to 1 Gbit/s: $qdisc"; exit 1; }
done
echo "node1, node2: eth0 shaped by tbf to 1 Gbit/s"

"$tests" --gtest_filter='Slurm.GlooScriptOnTwoNodesTimesTwoTasksTrainsToCompletion:Slurm.ARequeuedJobResumesFromItsCheckpointBitIdentically'
