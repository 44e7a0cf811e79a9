"""PyTorch's own local SGD on chapter 08's task, as a reference: PostLocalSGDOptimizer with a
PeriodicModelAverager(period=H, warmup_steps=0) over plain SGD, no DDP (every rank steps on its own
gradient), Gloo, one process per rank forked as tests/ddp_reference.py forks them, from the initial
parameters a C++ run saved (--init), each rank on the slice 08 gives its replica (the formula of
common/data/toy_task.cpp). Compares every rank's final parameters with the C++ replica of the same
rank (--compare-dir holds params.r<rank>.pt) and prints the largest absolute difference. Exit code
0 when it is at most --tolerance, 1 otherwise, 2 on bad input.

  python3 tests/local_sgd_reference.py --init init.pt --compare-dir run/ --world-size 2 --sync-every 4 --tolerance 0
"""
import argparse
import os
import sys
import tempfile

os.environ["OPENBLAS_NUM_THREADS"] = "1"  # as tests/ddp_reference.py: one BLAS thread

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402
from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager  # noqa: E402
from torch.distributed.optim import PostLocalSGDOptimizer  # noqa: E402

from ddp_reference import FEATURES, HIDDEN, batch  # noqa: E402
from reference_util import compare, leave, load_list, run_ranks  # noqa: E402


def worker(rank, args, store_file, out_dir):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + store_file, rank=rank, world_size=args.world_size)
    model = nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, 1))
    with torch.no_grad():
        for p, t in zip(model.parameters(), load_list(args.init)):
            p.copy_(t)
    opt = PostLocalSGDOptimizer(optim=torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum),
                                averager=PeriodicModelAverager(period=args.sync_every, warmup_steps=0))
    for step in range(args.steps):
        x, y = batch(step, rank, args.batch, args.world_size)
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    torch.save([p.detach().clone() for p in model.parameters()], os.path.join(out_dir, f"rank{rank}.pt"))
    leave()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--init", required=True)
    ap.add_argument("--compare-dir", required=True, help="the C++ run's folder: params.r<rank>.pt")
    ap.add_argument("--world-size", type=int, required=True)
    ap.add_argument("--sync-every", type=int, required=True)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--momentum", type=float, default=0.0)
    ap.add_argument("--tolerance", type=float, required=True)
    args = ap.parse_args()
    wanted = [args.init] + [os.path.join(args.compare_dir, f"params.r{r}.pt") for r in range(args.world_size)]
    for path in wanted:
        if not os.path.isfile(path):
            print(f"local_sgd_reference: no such file: {path}", file=sys.stderr)
            return 2
    worst = 0
    with tempfile.TemporaryDirectory() as tmp:
        run_ranks(worker, (args, os.path.join(tmp, "store"), tmp), args.world_size)
        for r in range(args.world_size):
            code = compare(load_list(wanted[1 + r]), load_list(os.path.join(tmp, f"rank{r}.pt")), f"chapter 08 --sync-every "
                           f"{args.sync_every}, replica r{r}", args.world_size, args.tolerance,
                           reference="PostLocalSGDOptimizer")
            worst = max(worst, code)
    return worst


if __name__ == "__main__":
    sys.exit(main())
