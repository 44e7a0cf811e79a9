"""PyTorch's own fully_shard (FSDP2) running chapter 07's training, as a reference.

The same model (loaded with the initial parameters the C++ run saved with --save-init), the same
Fashion-MNIST files, DistributedSampler and DataLoader, warm-up + cosine schedule and SGD with
momentum or AdamW as 05's reference (trainer_reference.py), with each layer wrapped by
fully_shard() as 07_fsdp cuts the model into units, and gradient accumulation with
set_requires_gradient_sync(False) on all but the last micro-batch, as 07's no_sync(). Compares
the final parameters (gathered whole: full_tensor()) with the C++ run's (--compare) and prints
the largest absolute difference. Exit code 0 when it is at most --tolerance, 1 otherwise, 2 on
bad input or a PyTorch without fully_shard (1.13: FSDP2 came in 2.4 and torch.distributed.fsdp's
fully_shard in 2.6).

--record-order FILE writes, from rank 0's first step, the order in which FSDP2 issued its
all-gathers ("gather fc2"), each unit's forward began ("forward fc2") and its backward ended
(the gradient of its input: "backward fc2", none for the first unit, whose input needs none),
one a line: Note [Prefetch] in 07_fsdp/fsdp.cpp says what it is. --forward-prefetch asks each
unit to prefetch the next in forward (FSDPModule.set_modules_to_forward_prefetch).
"""
import argparse
import faulthandler
import os
import sys
import tempfile

import trainer_reference as tr  # first: it sets OPENBLAS_NUM_THREADS before torch loads

import torch  # noqa: E402
from torch import nn

from reference_util import compare, leave, load_list, run_ranks

UNITS = {"mlp": ["fc1", "fc2", "fc3"], "cnn": ["conv1", "conv2", "fc1", "fc2"]}  # as 07_fsdp/units.h


def record_order(model, units, world):
    """The events of --record-order, as they happen on this rank, in a list."""
    import torch.distributed as dist
    events, by_size = [], {}
    for name in units:  # an all-gather's output: every rank's shard of the unit, each padded (Shard(0))
        size = sum(-(-p.shape[0] // world) * world * (p.numel() // p.shape[0]) for p in getattr(model, name).parameters())
        by_size[size] = name
    all_gather = dist.all_gather_into_tensor  # what FSDP2's DefaultAllGather calls (_fsdp_collectives.py)

    def gather(output, *args, **kwargs):
        events.append("gather " + by_size.get(output.numel(), str(output.numel())))
        return all_gather(output, *args, **kwargs)
    dist.all_gather_into_tensor = gather

    def before(name):
        def hook(module, args):
            events.append("forward " + name)
            if torch.is_grad_enabled() and args[0].requires_grad:
                args[0].register_hook(lambda g: events.append("backward " + name))
        return hook
    for name in units:  # registered after fully_shard's own: they run after its unshard
        getattr(model, name).register_forward_pre_hook(before(name))
    return events


def worker(rank, a, store_file, out_file):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    images, labels, model = tr.start_rank(rank, a, store_file)
    # On the CPU, as 07 on Gloo: without a mesh fully_shard takes the GPU's where there is one
    # (and moves the model there, away from the data).
    mesh = init_device_mesh("cpu", (a.world_size,))
    for name in UNITS[a.model]:
        fully_shard(getattr(model, name), mesh=mesh)
    fully_shard(model, mesh=mesh)
    units = [getattr(model, name) for name in UNITS[a.model]]
    if a.forward_prefetch:
        for unit, following in zip(units, units[1:]):
            unit.set_modules_to_forward_prefetch([following])
    events = record_order(model, UNITS[a.model], a.world_size) if a.record_order else None
    # foreach=False: the per-parameter loop, which PyTorch picks for CPU tensors anyway.
    opt_class, kwargs = tr.optimizer_of(a)
    opt = opt_class(model.parameters(), foreach=False, **kwargs)
    for step, total, micro in tr.steps(a, images, labels):
        for g in opt.param_groups:
            g["lr"] = tr.learning_rate(a, step, total)
        opt.zero_grad()
        for k, (x, y) in enumerate(micro):
            model.set_requires_gradient_sync(k + 1 == len(micro))
            (nn.functional.cross_entropy(model(x), y) / float(len(micro))).backward()
        opt.step()
        if events is not None and rank == 0 and "step" not in events:
            events.append("step")
            with open(a.record_order, "w") as f:
                f.write("\n".join(events[:-1]) + "\n")
    whole = [p.full_tensor().detach().clone() for p in model.parameters()]  # every rank takes part
    if rank == 0:
        torch.save(whole, out_file)
    leave()


def main():
    faulthandler.dump_traceback_later(40, exit=True)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    tr.add_training_arguments(ap, list(UNITS))
    ap.add_argument("--record-order", metavar="FILE", help="rank 0's first step's all-gathers, forwards and backwards, in order")
    ap.add_argument("--forward-prefetch", action="store_true", help="each unit prefetches the next in forward")
    a = ap.parse_args()
    if not a.init or not a.compare:
        print("--init and --compare are required", file=sys.stderr)
        return 2
    try:
        from torch.distributed.fsdp import fully_shard  # noqa: F401
    except Exception as e:  # 1.13's torch.distributed.fsdp does not even import on Python 3.11 (a dataclass error)
        print(f"torch {torch.__version__} has no torch.distributed.fsdp.fully_shard (2.6 and later have): "
              f"{type(e).__name__}: {str(e)[:120]}")
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        out_file = os.path.join(tmp, "final.pt")
        run_ranks(worker, (a, os.path.join(tmp, "store"), out_file), a.world_size)
        theirs = load_list(out_file)
    return compare(load_list(a.compare), theirs, "07_fsdp " + a.model, a.world_size, a.tolerance, reference="PyTorch fully_shard")


if __name__ == "__main__":
    sys.exit(main())
