#!/usr/bin/env bash
# Runs the course (01-08), each chapter at world size 2 (08: three replicas), from a build folder (scripts/run.sh
# sets up and builds build-cpu/, running each chapter as soon as it is built; a GPU host with its
# own build runs this directly).
# Usage: scripts/course.sh [build folder]   (default: build-cpu)
# Without --backend every chapter chooses as torchrun users expect (Note [Choosing the backend]):
# NCCL only when each local rank gets its own GPU, so on a one-GPU host these 2-rank runs use Gloo.
# Sourced (as scripts/run.sh does), it only defines the chapters: course_chapters, one function
# chapter_<folder> BIN per chapter, and course_done; and course_tools, the programs besides the
# chapters that pages ask a learner to run (scripts/run.sh builds them after the chapters).
set -euo pipefail
course_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
course_chapters=(01_join_group 02_spawn 03_manual_allreduce 04_grad_hooks 05_ddp 06_slurm 07_fsdp 08_fault_tolerance)
course_tools=(trace_merge ddp_sim allreduce_bench)
# The kernels the pages' figures were made with, so that the course prints what its pages show.
source "$course_root/scripts/kernels.sh"

chapter_01_join_group() {
  local bin=$1 port rank1
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  echo
  echo "== 01_join_group: two ranks started separately, as from two terminals (port $port)"
  "$bin/01_join_group" --rank 1 --world-size 2 --master-port "$port" &
  rank1=$!
  "$bin/01_join_group" --rank 0 --world-size 2 --master-port "$port"
  wait $rank1
}

chapter_02_spawn() {
  local bin=$1
  echo
  echo "== 02_spawn: one launcher forks both ranks, as two simulated nodes"
  "$bin/02_spawn" --nnodes 2 --nproc-per-node 1
}

chapter_03_manual_allreduce() {
  local bin=$1
  echo
  echo "== 03_manual_allreduce: gradients averaged by hand, 2 ranks forked by 02_spawn"
  "$bin/02_spawn" --world-size 2 -- "$bin/03_manual_allreduce"
}

chapter_04_grad_hooks() {
  local bin=$1
  echo
  echo "== 04_grad_hooks: the same averaging in gradient hooks (async), with Adam"
  "$bin/02_spawn" --world-size 2 -- "$bin/04_grad_hooks" --comm async --optimizer adam
}

chapter_05_ddp() {
  local bin=$1
  echo
  echo "== 05_ddp: our own DDP class training an MLP on Fashion-MNIST, 300 steps (outputs in runs/05_ddp)"
  "$bin/05_ddp" --nproc-per-node 2 --max-steps 300 --log-every 100 --reset --out "$course_root/runs/05_ddp"
}

chapter_06_slurm() {
  local bin=$1
  echo
  echo "== 06_slurm: the same trainer as a Slurm job on a simulated 2-node cluster; a preemption drill"
  echo "   2 s into training makes it checkpoint and requeue itself, and the requeued job resumes"
  "$bin/06_slurm" --local --nodes 2 --tasks-per-node 1 --out-dir "$course_root/runs/06_slurm" \
    -- --max-steps 500 --log-every 100 --drill-after 2
}

chapter_07_fsdp() {
  local bin=$1
  echo
  echo "== 07_fsdp: the same trainer with each rank keeping half of the model (FSDP), 300 steps (outputs in runs/07_fsdp)"
  "$bin/07_fsdp" --nproc-per-node 2 --max-steps 300 --log-every 100 --reset --out "$course_root/runs/07_fsdp"
}

chapter_08_fault_tolerance() {
  local bin=$1
  echo
  echo "== 08_fault_tolerance: three replicas, one killed in its all-reduce and replaced; the others never stop"
  "$bin/08_fault_tolerance" --replicas 3 --inject r1:allreduce@8 --replace-after 0 --steps 100 --step-ms 50
}

course_done() {
  echo
  echo "== done: every chapter ran (the batch scripts for a real Slurm are in 06_slurm/)"
  echo "== next: read 01_join_group/README.md, then work its exercise 01.1 (scripts/exercise.sh 01.1 checks your answer)"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  bin=${1:-$course_root/build-cpu}
  [ -x "$bin/05_ddp" ] || { echo "no chapters built in $bin (scripts/build.sh cpu)" >&2; exit 2; }
  for chapter in "${course_chapters[@]}"; do
    "chapter_$chapter" "$bin"
  done
  course_done
fi
