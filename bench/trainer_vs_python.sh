#!/usr/bin/env bash
# Chapter 05's C++ trainer vs PyTorch's Python DDP: same models, data, world size, steps and
# LibTorch version, measured in the same run; prints samples/s of each and the ratio.
# Usage: bench/trainer_vs_python.sh [cpu|cuda] [steps] [world size] [batch per rank] [models]
#        (default: cpu 300 2 64 "mlp cnn")
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
flavour=${1:-cpu}
steps=${2:-300}
world=${3:-2}
batch=${4:-64}
models=${5:-mlp cnn}
case $flavour in
  cpu)  python=/usr/bin/python3 ;;         # Debian's python3-torch, the same 1.13 as libtorch-dev
  cuda) python=$root/.venv/bin/python ;;   # the pip torch whose LibTorch build-cuda uses
  *) echo "unknown flavour '$flavour': use cpu or cuda" >&2; exit 2 ;;
esac
"$root/scripts/build.sh" "$flavour" 05_ddp 02_spawn > /dev/null
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

rate() { sed -n 's/.*throughput: \([0-9.]*\) samples\/s.*/\1/p' | tail -n 1; }
echo "05_ddp (C++) vs torch.nn.parallel.DistributedDataParallel (Python), $flavour flavour,"
echo "world size $world, $steps steps of $batch images per rank, Gloo on 127.0.0.1, $(nproc) cores"
printf "%-6s %14s %14s %8s\n" model "C++ samples/s" "Py samples/s" ratio
for model in $models; do
  cpp=$("$root/build-$flavour/05_ddp" --nproc-per-node "$world" --model "$model" --max-steps "$steps" \
        --batch-size "$batch" --log-every "$steps" --reset --out "$out/$model" 2>&1 | rate)
  py=$("$python" "$root/bench/python_ddp.py" --model "$model" --world-size "$world" --steps "$steps" \
        --batch-size "$batch" 2>&1 | rate)
  printf "%-6s %14s %14s %8s\n" "$model" "$cpp" "$py" "$(awk -v a="$cpp" -v b="$py" 'BEGIN { printf "%.2fx", a / b }')"
done
