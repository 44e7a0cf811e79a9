#!/usr/bin/env bash
# Chapter 05's C++ trainer vs PyTorch's Python DDP: same models, data, world size, steps and
# LibTorch version, measured in the same run; prints samples/s of each and the ratio.
# Usage: bench/trainer_vs_python.sh [cpu|cuda] [steps] [world size] [batch per rank] [models]
#        (default: cpu 300 2 64 "mlp cnn"); REPEATS=N runs of each side, median reported (3)
#        DDP_BUILD_DIR=folder and DDP_PYTHON=python: an existing build and Python (a GPU host that
#        cannot run scripts/setup.sh); then nothing is built
# Writes its figures to results/trainer_vs_python.json (cpu flavour) or
# results/trainer_vs_python_cuda.json (scripts/results.sh), which the pages cite.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/stop.sh"  # Ctrl-C: this script and every run it started stop (Note [Stop means stop])
flavour=${1:-cpu}
steps=${2:-300}
world=${3:-2}
batch=${4:-64}
models=${5:-mlp cnn}
repeats=${REPEATS:-3}
case $flavour in
  cpu)  python=/usr/bin/python3 ;;         # Debian's python3-torch, the same 1.13 as libtorch-dev
  cuda) python=$root/.venv/bin/python ;;   # the pip torch whose LibTorch build-cuda uses
  *) echo "unknown flavour '$flavour': use cpu or cuda" >&2; exit 2 ;;
esac
python=${DDP_PYTHON:-$python}
build=${DDP_BUILD_DIR:-$root/build-$flavour}  # as the other bench scripts
if [ -z "${DDP_BUILD_DIR:-}" ]; then
  "$root/scripts/build.sh" "$flavour" 05_ddp 02_spawn > /dev/null
elif [ ! -x "$build/05_ddp" ]; then
  echo "DDP_BUILD_DIR=$build has no 05_ddp" >&2; exit 2
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

data_dir=${DATA_DIR:-/usr/share/datasets/fashion-mnist}
# On a GPU host (cuda flavour, a GPU per rank) both sides run NCCL on the GPUs, and Python runs
# twice: with a DataLoader copying each batch, and with the dataset resident on the GPU (the
# strongest Python; 05_ddp always keeps it there: Note [The data path on a GPU]).
gpus=0
[ "$flavour" = cuda ] && gpus=$("$python" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
if [ "$gpus" -ge "$world" ] && [ "$gpus" -gt 0 ]; then device=cuda; py_runs="copy resident"; else device=cpu; py_runs=copy; fi
# Like for like: PyTorch's Python DDP runs without deterministic algorithms, so on a GPU 05_ddp
# does too (its default is on: Note [Reproducible GPU runs]; 05_ddp/going_further/gpu.md says what it costs).
# Enough epochs for every step (05_ddp stops after --epochs, 3 by default; Python runs on).
cpp_extra=(--epochs $(( steps * batch * world / 60000 + 1 )))
[ "$device" = cuda ] && cpp_extra+=(--deterministic off)
# Both sides get the threads torchrun (and our 02_spawn) would give them: one per rank when
# several ranks share the host, unless OMP_NUM_THREADS is set (Note [BLAS threads]).
cores=$(nproc --all)
[ "$world" -gt 1 ] && export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'; }
rate() { sed -n 's/.*throughput: \([0-9.]*\) samples\/s.*/\1/p' | tail -n 1; }
echo "05_ddp (C++) vs torch.nn.parallel.DistributedDataParallel (Python), $flavour flavour,"
if [ "$device" = cuda ]; then
  echo "world size $world on $world GPU(s), NCCL, $steps steps of $batch images per rank, 05_ddp --deterministic off"
  printf "%-6s %14s %16s %8s %16s %8s\n" model "C++ samples/s" "Py copy" ratio "Py resident" ratio
else
  echo "world size $world, $steps steps of $batch images per rank, Gloo on 127.0.0.1, $cores cores, OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset}"
  printf "%-6s %14s %14s %8s   (medians of $repeats runs each)\n" model "C++ samples/s" "Py samples/s" ratio
fi
# Each side runs $repeats times, alternating, and the median counts: on 2 shared cores one run
# of the same command spread by 25 % (bench/README.md).
median() { sort -g | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
source "$root/scripts/results.sh"
members=""  # the JSON members of the result file, one per model
json_list() { echo "[$(echo $* | tr ' ' ',')]"; }
for model in $models; do
  cpp_runs=""
  declare -A py_all=()
  for ((k = 0; k < repeats; k++)); do
    cpp_runs+="$("$build/05_ddp" --nproc-per-node "$world" --model "$model" --max-steps "$steps" \
          --batch-size "$batch" --log-every 100 --data-dir "$data_dir" --reset --out "$out/$model" "${cpp_extra[@]}" 2>&1 | rate)"$'\n'
    for data in $py_runs; do
      py_all[$data]+="$("$python" "$root/bench/python_ddp.py" --model "$model" --world-size "$world" --steps "$steps" \
            --batch-size "$batch" --device "$device" --data "$data" --data-dir "$data_dir" 2>&1 | rate)"$'\n'
    done
  done
  cpp=$(printf "%s" "$cpp_runs" | median)
  row=$(printf "%-6s %14s" "$model" "$cpp")
  for data in $py_runs; do
    py=$(printf "%s" "${py_all[$data]}" | median)
    row+=$(printf " %14s %8s" "$py" "$(ratio "$cpp" "$py")")
  done
  echo "$row"
  member="\"$model\": {\"cpp_samples_per_s\": $cpp, \"cpp_runs\": $(json_list $cpp_runs)"
  for data in $py_runs; do
    py=$(printf "%s" "${py_all[$data]}" | median)
    member+=", \"python_${data}_samples_per_s\": $py, \"python_${data}_runs\": $(json_list ${py_all[$data]})"
    member+=", \"cpp_over_python_${data}\": $(awk -v a="$cpp" -v b="$py" 'BEGIN { printf "%.4f", a / b }')"
  done
  members+="$member},"$'\n  '
  echo "       runs: C++ $(echo $cpp_runs)$(for data in $py_runs; do printf "; Python %s %s" "$data" "$(echo ${py_all[$data]})"; done)"
done
name=trainer_vs_python$([ "$flavour" = cpu ] || echo "_$flavour")
# In a subshell without OMP_NUM_THREADS, which nproc would take for the machine's core count.
threads=${OMP_NUM_THREADS:-unset}
(unset OMP_NUM_THREADS; write_result "$name" "bench/trainer_vs_python.sh $flavour $steps $world $batch" \
  "$members\"flavour\": \"$flavour\", \"device\": \"$device\", \"steps\": $steps, \"world\": $world, \"batch_per_rank\": $batch, \"repeats\": $repeats, \"omp_num_threads\": \"$threads\"")
