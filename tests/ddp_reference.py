"""PyTorch's own DistributedDataParallel on the toy task of chapters 03-04, as a reference.

Trains with torch.nn.parallel.DistributedDataParallel (Gloo, one process per rank, forked by
torch.multiprocessing) from the initial parameters a C++ run saved (--init), on the same data
(the formula of common/data/toy_task.cpp, in plain double arithmetic), with the same optimizer;
then compares the final parameters with the C++ run's (--compare) and prints the largest
absolute difference. Exit code 0 when it is at most --tolerance, 1 otherwise, 2 on bad input.

  python3 tests/ddp_reference.py --init init.pt --compare final.pt --world-size 2 --tolerance 0
"""
import argparse
import os
import sys
import tempfile

# One BLAS thread, as torch.set_num_threads(1) below gives one intra-op thread: OpenBLAS
# otherwise splits a matrix product over every core and rounds differently (Note [BLAS
# threads] in common/compute/blas.h). Read when libblas is loaded, so before torch is imported.
os.environ["OPENBLAS_NUM_THREADS"] = "1"

import torch  # noqa: E402
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from reference_util import compare, leave, load_list, run_ranks

FEATURES, HIDDEN = 8, 16


def batch(step, rank, per_rank, world):
    """The same numbers as ddp::toy::batch(): integer arithmetic in double, then float32."""
    xs, ys = [], []
    for i in range(per_rank):
        g = step * world * per_rank + rank * per_rank + i
        row = [float((g * 7 + j * 13) % 17 - 8) / 8.0 for j in range(FEATURES)]
        target = 0.0
        for j in range(FEATURES):
            target += row[j] * ((j % 3) - 1) * 0.5
        target += 0.25 * row[0] * row[1]
        xs.append(row)
        ys.append([target])
    return torch.tensor(xs, dtype=torch.float64).float(), torch.tensor(ys, dtype=torch.float64).float()


def worker(rank, args, store_file, out_file):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + store_file, rank=rank,
                            world_size=args.world_size)
    model = nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, 1))
    with torch.no_grad():
        for p, t in zip(model.parameters(), load_list(args.init)):
            p.copy_(t)
    ddp = DDP(model)
    if args.optimizer == "adam":
        opt = torch.optim.Adam(ddp.parameters(), lr=args.lr)
    else:
        opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=args.momentum)
    for step in range(args.steps):
        x, y = batch(step, rank, args.batch, args.world_size)
        opt.zero_grad()
        nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
    if rank == 0:
        torch.save([p.detach().clone() for p in model.parameters()], out_file)
    leave()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--init", required=True, help="initial parameters (torch::pickle_save of a list)")
    ap.add_argument("--compare", required=True, help="final parameters of the C++ run")
    ap.add_argument("--world-size", type=int, required=True)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd")
    ap.add_argument("--momentum", type=float, default=0.0)
    ap.add_argument("--tolerance", type=float, required=True)
    args = ap.parse_args()
    for path in (args.init, args.compare):
        if not os.path.isfile(path):
            print(f"ddp_reference: no such file: {path}", file=sys.stderr)
            return 2
    with tempfile.TemporaryDirectory() as tmp:
        out_file = os.path.join(tmp, "python_final.pt")
        run_ranks(worker, (args, os.path.join(tmp, "store"), out_file), args.world_size)
        theirs = load_list(out_file)
    return compare(load_list(args.compare), theirs, "chapters 03-04", args.world_size, args.tolerance)


if __name__ == "__main__":
    sys.exit(main())
