"""What the Python references share: running and ending their ranks, reading C++'s tensor lists,
and the verdict line."""
import importlib
import os
import sys

import torch
import torch.distributed as dist
import torch.jit._pickle
import torch.multiprocessing as mp


# Note [Imports before the fork]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# PyTorch 2.x imports some of its modules only when first used, in whichever process uses them:
# DDP's constructor imports torch._dynamo (torch/nn/parallel/distributed.py,
# DistributedDataParallel.__init__, `torch._dynamo.utils.get_optimize_ddp_mode()`, PyTorch 2.11),
# some 280 modules and 0.7 s of CPU. The ranks are forked (run_ranks), so every rank of every case
# paid it again. import_before_fork() imports it once, in the process that forks them: run_ranks,
# and the reference server as it starts, before its first case. An import runs no tensor
# operation and starts no thread (measured: one thread before and after). 1.13 has no _dynamo.
def import_before_fork():
    if int(torch.__version__.split(".")[0]) >= 2:
        importlib.import_module("torch._dynamo")  # (an `import torch._dynamo` here would make torch a local name)


def run_ranks(worker, args, world_size):
    """Runs worker(rank, *args) in world_size processes, as mp.spawn does, but forked from this
    process, which has imported this script and torch once: each spawned child would import
    torch again (about 1.3 s of CPU for the pip wheel), and so did a forkserver (measured: a
    2-rank MLP reference 4.4 s with a forkserver, 3.0 s forked). Fork is safe here: this process
    has run no tensor operation, so no OpenMP pool exists to deadlock (NOTES)."""
    import_before_fork()
    mp.start_processes(worker, args=args, nprocs=world_size, join=True, start_method="fork")


def leave():
    """Ends a rank once rank 0 has saved the parameters: a barrier, then os._exit(0), which skips
    the teardown of the rank's DDP object and its Gloo process group. The references hung about
    once in 6 full test runs, there: a rank left hanging, looked at with gdb, had its main thread,
    holding the GIL, in ~Reducer -> ~ProcessGroupGloo joining Gloo's worker thread, and that thread
    freeing a tensor whose Python object needs the GIL (TensorImpl::destroy_pyobj_if_needed ->
    PyEval_AcquireThread): a deadlock, in PyTorch 1.13's teardown, not in what is compared.
    torch.multiprocessing counts exit code 0 as success."""
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def load_list(path):
    """A list of tensors written by torch::pickle_save (C++) or torch.save (Python)."""
    if hasattr(torch.serialization, "add_safe_globals"):
        # torch >= 2.6 loads weights only by default; C++'s pickler writes tensor lists with
        # build_tensorlist, which is safe but not on the default list.
        torch.serialization.add_safe_globals([torch.jit._pickle.build_tensorlist])
    return list(torch.load(path))


def compare(ours, theirs, what, world_size, tolerance, reference="PyTorch DDP"):
    """Prints the verdict line the C++ tests look for; returns the exit code (0 within tolerance)."""
    if len(ours) != len(theirs) or any(a.shape != b.shape for a, b in zip(ours, theirs)):
        print(f"{what}: parameter lists differ in shape")
        return 1
    diff = max((a - b).abs().max().item() for a, b in zip(ours, theirs))
    identical = all(torch.equal(a, b) for a, b in zip(ours, theirs))
    verdict = "OK" if diff <= tolerance else "FAILED"
    print(f"torch {torch.__version__}: {reference} vs C++ ({what}) at world size {world_size}: "
          f"max |diff| = {diff:.3g}, bit-identical: {'yes' if identical else 'no'}, tolerance {tolerance:g}: {verdict}")
    return 0 if diff <= tolerance else 1
