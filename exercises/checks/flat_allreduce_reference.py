"""Exercise 03.2's reference: chapter 03's training with its gradients averaged by one all-reduce
of all of them flattened, in PyTorch over its own Gloo, as the exercise asks of the C++.

Trains from the initial parameters a C++ run saved (--init) on the toy task (the same data as
ddp::toy::batch(), through tests/ddp_reference.py's batch()), each step: loss, gradients,
torch.cat of each gradient reshaped flat (in the model's parameter order), one all_reduce(SUM),
each piece copied back and divided by the world size, then p <- p - lr * g. Gloo cuts the one
tensor into the same segments in PyTorch as in LibTorch of the same version, so a C++ run that
does the same ends bit-identical; per-gradient all-reduces or a ring of sends end elsewhere at
3 ranks. Prints the verdict line of tests/reference_util.py; exit 0 when bit-identical.

  python3 exercises/checks/flat_allreduce_reference.py --init init.pt --compare final.pt --world-size 3 --steps 4
"""
import argparse
import os
import sys
import tempfile

os.environ["OPENBLAS_NUM_THREADS"] = "1"  # as the C++ ranks compute (Note [BLAS threads])
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402

from ddp_reference import FEATURES, HIDDEN, batch  # noqa: E402
from reference_util import compare, leave, load_list, run_ranks  # noqa: E402


def worker(rank, args, store_file, out_file):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + store_file, rank=rank, world_size=args.world_size)
    model = nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, 1))
    params = list(model.parameters())
    with torch.no_grad():
        for p, t in zip(params, load_list(args.init)):
            p.copy_(t)
    for step in range(args.steps):
        x, y = batch(step, rank, args.batch, args.world_size)
        loss = nn.functional.mse_loss(model(x), y)
        grads = torch.autograd.grad(loss, params)
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)
        with torch.no_grad():
            offset = 0
            for p, g in zip(params, grads):
                g.copy_(flat[offset:offset + g.numel()].view_as(g))
                offset += g.numel()
                g.div_(args.world_size)
                p.add_(g, alpha=-args.lr)
    if rank == 0:
        torch.save([p.detach().clone() for p in params], out_file)
    leave()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--init", required=True)
    ap.add_argument("--compare", required=True)
    ap.add_argument("--world-size", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--batch", type=int, default=8)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out_file = os.path.join(tmp, "python_final.pt")
        run_ranks(worker, (args, os.path.join(tmp, "store"), out_file), args.world_size)
        theirs = load_list(out_file)
    return compare(load_list(args.compare), theirs, "exercise 03.2", args.world_size, 0.0,
                   reference="PyTorch, one flat all-reduce")


if __name__ == "__main__":
    sys.exit(main())
