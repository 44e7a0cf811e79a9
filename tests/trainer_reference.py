"""PyTorch's own DistributedDataParallel running chapter 05's training, as a reference.

The same model (built here in Python, loaded with the initial parameters the C++ run saved with
--save-init), the same Fashion-MNIST files, torch.utils.data.DistributedSampler and DataLoader,
the same warm-up + cosine schedule, SGD with momentum or AdamW (--zero: inside
ZeroRedundancyOptimizer), gradient accumulation with no_sync().
Compares the final parameters with the C++ run's (--compare) and prints the largest absolute
difference. Exit code 0 when it is at most --tolerance, 1 otherwise, 2 on bad input.

Also: --print-sampler N,R,SEED,EPOCH,SHUFFLE,DROP_LAST (repeatable) prints DistributedSampler's
indices, one line per rank and "--" after each spec, for the sampler's unit test.
"""
import argparse
import contextlib
import datetime
import faulthandler
import gzip
import itertools
import math
import os
import signal
import sys
import tempfile

# One BLAS thread, as torch.set_num_threads(1) below gives one intra-op thread: OpenBLAS
# otherwise splits a matrix product over every core and rounds differently (Note [BLAS
# threads] in common/compute/blas.h). Read when libblas is loaded, so before torch is imported.
os.environ["OPENBLAS_NUM_THREADS"] = "1"

import torch  # noqa: E402
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.distributed.algorithms.join import Join
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from reference_util import compare, leave, load_list, run_ranks


def read_idx(path, dims, limit):
    """The first `limit` items of an IDX file (all with 0): only their bytes are decompressed, as
    05_ddp reads them (Note [Reading only the samples a run uses]); every rank reads the file, and
    the whole training set took 0.47 s of CPU a rank."""
    with gzip.open(path, "rb") as f:
        header = f.read(4 + 4 * dims)
        shape = [int.from_bytes(header[4 + 4 * d:8 + 4 * d], "big") for d in range(dims)]
        if limit:
            shape[0] = min(shape[0], limit)
        raw = f.read(math.prod(shape))
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).reshape(shape)


def load_split(data_dir, train, limit):
    prefix = os.path.join(data_dir, "train" if train else "t10k")
    images = read_idx(prefix + "-images-idx3-ubyte.gz", 3, limit).reshape(-1, 1, 28, 28)
    labels = read_idx(prefix + "-labels-idx1-ubyte.gz", 1, limit).long()
    # Op for op as ddp::normalise_pixels().
    return images.to(torch.float32).div(255).sub(0.2860).div(0.3530), labels


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 512)
        self.fc2 = nn.Linear(512, 256)
        self.fc3 = nn.Linear(256, 10)

    def forward(self, x):
        x = torch.relu(self.fc1(x.flatten(1)))
        x = torch.relu(self.fc2(x))
        return self.fc3(x)


class MlpBranch(Mlp):
    """As MlpBranchImpl in 05_ddp/models.h: the aux head only when the batch's first image is
    bright at its centre."""
    def __init__(self):
        super().__init__()
        self.aux = nn.Linear(256, 10)

    def forward(self, x):
        branch = bool(x[0, 0, 14, 14].item() > 0)
        x = torch.relu(self.fc1(x.flatten(1)))
        x = torch.relu(self.fc2(x))
        return self.fc3(x) + self.aux(x) if branch else self.fc3(x)


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.fc1 = nn.Linear(64 * 7 * 7, 256)
        self.fc2 = nn.Linear(256, 10)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.max_pool2d(torch.relu(self.conv2(x)), 2)
        x = torch.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


class CnnBn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(32)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(64)
        self.fc1 = nn.Linear(64 * 7 * 7, 256)
        self.fc2 = nn.Linear(256, 10)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 2)
        x = torch.max_pool2d(torch.relu(self.bn2(self.conv2(x))), 2)
        x = torch.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


MODELS = {"mlp": Mlp, "cnn": Cnn, "cnn_bn": CnnBn, "mlp_branch": MlpBranch}


def learning_rate(a, step, total):
    """As learning_rate() in 05_ddp/main.cpp."""
    if step < a.warmup_steps:
        return a.lr * (step + 1) / a.warmup_steps
    progress = (step - a.warmup_steps) / max(1, total - a.warmup_steps)
    return a.lr * 0.5 * (1 + math.cos(math.pi * progress))


def serialised_powersgd_hook(state, bucket):
    """PyTorch's powerSGD_hook, each bucket's future waited for before the next bucket's hook
    runs. Unwaited, with Gloo and two buckets (the CNN), the hook's chained all-reduces (P, Q),
    started from Gloo's callback thread, race the next bucket's, started from the autograd
    thread: the ranks issue them in different orders and Gloo aborts (measured with 1.13:
    "op.preamble.length <= op.nbytes. 268 vs 96"). The arithmetic is the hook's own."""
    fut = powerSGD_hook.powerSGD_hook(state, bucket)
    fut.wait()
    return fut


def cpu_only():
    """The references run on the CPU, as the C++ side under test (Gloo, DDP_GPU_COUNT=0). On a GPU
    host PyTorch's powerSGD_hook calls torch.cuda.synchronize(device) whenever CUDA is available,
    and a CPU tensor's device makes that raise "Expected a cuda device, but got: cpu"
    (ddp_comm_hooks/powerSGD_hook.py, decompress, PyTorch 2.11): so CUDA is not offered to them."""
    torch.cuda.is_available = lambda: False


def steps(a, images, labels):
    """The steps of 05_ddp's and 07_fsdp's main.cpp: (step, total steps, its micro-batches), each
    epoch DistributedSampler's shuffle of it, --grad-accum batches a step, the last one short."""
    sampler = DistributedSampler(TensorDataset(images, labels), shuffle=True, seed=a.seed)
    loader = DataLoader(TensorDataset(images, labels), batch_size=a.batch_size, sampler=sampler)
    batches = len(loader)
    steps_per_epoch = (batches + a.grad_accum - 1) // a.grad_accum
    total = min(a.epochs * steps_per_epoch, a.max_steps)
    epoch_batches = None
    for step in range(total):
        epoch, in_epoch = divmod(step, steps_per_epoch)
        if epoch_batches is None or in_epoch == 0:
            sampler.set_epoch(epoch)
            epoch_batches = list(loader)
        first, last = in_epoch * a.grad_accum, min(batches, (in_epoch + 1) * a.grad_accum)
        yield step, total, [epoch_batches[b] for b in range(first, last)]


def train_step(a, ddp, opt, step, total, micro_batches):
    """One optimizer step of 05_ddp's main.cpp: the schedule's lr, zero_grad, the micro-batches'
    losses divided by their number, all but the last under no_sync()."""
    for g in opt.param_groups:
        g["lr"] = learning_rate(a, step, total)
    opt.zero_grad()
    for k, (x, y) in enumerate(micro_batches):
        with ddp.no_sync() if k + 1 < len(micro_batches) else contextlib.nullcontext():
            (nn.functional.cross_entropy(ddp(x), y) / float(len(micro_batches))).backward()
    opt.step()


def start_rank(rank, a, store_file):
    """What every reference rank does first (this one's and fsdp_reference.py's): joins the group,
    loads the training images, builds the model with the C++ run's initial parameters (--init).
    Returns (images, labels, model)."""
    # A rank that hangs prints its stack at 38 s, before the harness's watchdog (40 s) stops the
    # whole reference: a signal, since faulthandler.dump_traceback_later would wait forever here
    # for the parent's watchdog thread, which fork did not copy.
    faulthandler.register(signal.SIGALRM, all_threads=True)
    signal.alarm(38)
    cpu_only()
    torch.set_num_threads(1)
    # A collective that waits 40 s fails instead of hanging (a run takes seconds).
    dist.init_process_group("gloo", init_method="file://" + store_file, rank=rank, world_size=a.world_size,
                            timeout=datetime.timedelta(seconds=40))
    images, labels = load_split(a.data_dir, True, a.train_samples)
    model = MODELS[a.model]()
    with torch.no_grad():
        for p, t in zip(model.parameters(), load_list(a.init)):
            p.copy_(t)
    return images, labels, model


def optimizer_of(a):
    """--optimizer's class and arguments, as 05_ddp's optimizer_factory() builds it."""
    if a.optimizer == "adamw":
        return torch.optim.AdamW, dict(lr=a.lr, weight_decay=a.weight_decay)
    return torch.optim.SGD, dict(lr=a.lr, momentum=a.momentum, weight_decay=a.weight_decay)


def worker(rank, a, store_file, out_file):
    images, labels, model = start_rank(rank, a, store_file)
    ddp = DDP(model, gradient_as_bucket_view=a.gradient_as_bucket_view, find_unused_parameters=a.find_unused_parameters)
    if a.comm_hook == "powersgd":  # as 05_ddp --comm-hook powersgd (Note [PowerSGD])
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=a.powersgd_rank,
                                            start_powerSGD_iter=a.powersgd_start_iter)
        ddp.register_comm_hook(state, serialised_powersgd_hook)
    elif a.comm_hook != "none":  # as 05_ddp --comm-hook (Note [Communication hooks])
        ddp.register_comm_hook(None, {"fp16": default_hooks.fp16_compress_hook,
                                      "bf16": default_hooks.bf16_compress_hook}[a.comm_hook])
    opt_class, kwargs = optimizer_of(a)
    if a.zero:  # as 05_ddp --zero (Note [ZeRO-1: optimizer state sharded])
        opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=opt_class, **kwargs)
    else:
        opt = opt_class(ddp.parameters(), **kwargs)
    if a.uneven_shards:
        return uneven_epochs(rank, a, ddp, opt, images, labels, out_file)
    for step, total, micro_batches in steps(a, images, labels):
        train_step(a, ddp, opt, step, total, micro_batches)
    if rank == 0:
        torch.save([p.detach().clone() for p in model.parameters()], out_file)
    leave()


def uneven_epochs(rank, a, ddp, opt, images, labels, out_file):
    """As 05_ddp --uneven-shards --join (Note [Uneven inputs and Join]): each rank its own share of
    DistributedSampler's shuffled list, without padding; each epoch inside Join([ddp]); a rank
    leaves an epoch at the first step whose micro-batches it cannot all run."""
    n, world, bs = len(images), a.world_size, a.batch_size
    b_max = (math.ceil(n / world) + bs - 1) // bs  # the longest share's batches, rank 0's
    steps_per_epoch = (b_max + a.grad_accum - 1) // a.grad_accum
    total = min(a.epochs * steps_per_epoch, a.max_steps)
    for epoch in range(a.epochs):
        if epoch * steps_per_epoch >= total:
            break
        g = torch.Generator()
        g.manual_seed(a.seed + epoch)
        own = torch.randperm(n, generator=g).tolist()[rank:n:world]
        b_own = (len(own) + bs - 1) // bs
        with Join([ddp], enable=a.join, divide_by_initial_world_size=not a.divide_by_live_ranks):
            for in_epoch in range(steps_per_epoch):
                step = epoch * steps_per_epoch + in_epoch
                first, last = in_epoch * a.grad_accum, min(b_max, (in_epoch + 1) * a.grad_accum)
                if step >= total or b_own < last:
                    break
                shares = [own[b * bs:(b + 1) * bs] for b in range(first, last)]
                train_step(a, ddp, opt, step, total, [(images[idx], labels[idx]) for idx in shares])
    if rank == 0:
        torch.save([p.detach().clone() for p in ddp.module.parameters()], out_file)
    leave()


def print_buckets(model_name):
    """PyTorch's DDP bucket layout for one of the models, as its logger reports it: the buckets
    of the first iteration (sizes in bytes), then the rebuilt ones (sizes and parameter
    indices) after three iterations. One rank: the layout does not depend on the world size."""
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("gloo", init_method="file://" + os.path.join(tmp, "store"), rank=0, world_size=1)
        torch.manual_seed(0)
        ddp = DDP(Cnn() if model_name == "cnn" else Mlp())
        for _ in range(3):
            x, y = torch.randn(8, 1, 28, 28), torch.randint(0, 10, (8,))
            nn.functional.cross_entropy(ddp(x), y).backward()
        d = ddp._get_ddp_logging_data()
        print("first:", d["bucket_sizes"])
        print("rebuilt:", d["rebuilt_bucket_sizes"], "|", d["rebuilt_per_bucket_param_indices"])
        dist.destroy_process_group()


def print_first_buckets(model_names):
    """PyTorch's DDP buckets of the first iteration, before any backward, for each model and each
    setting of static_graph and find_unused_parameters: one line each, "MODEL static_graph=S
    find_unused_parameters=F first: SIZES | INDICES", sizes in bytes as its logger reports them
    (_get_ddp_logging_data), the parameter indices of each bucket as its reducer holds them
    (_get_zeros_like_grad_buckets: each bucket's parameters, matched by storage). Note
    [Rebuilding the buckets]: _ddp_init_helper's bucket_size_limits."""
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("gloo", init_method="file://" + os.path.join(tmp, "store"), rank=0, world_size=1)
        for model_name, static_graph, find_unused in itertools.product(model_names, (False, True), (False, True)):
            torch.manual_seed(0)
            model = MODELS[model_name]()
            index = {p.data_ptr(): i for i, p in enumerate(model.parameters())}
            ddp = DDP(model, static_graph=static_graph, find_unused_parameters=find_unused)
            buckets = ddp.reducer._get_zeros_like_grad_buckets()
            indices = ", ".join(" ".join(str(index[p.data_ptr()]) for p in b.parameters()) for b in buckets)
            print(f"{model_name} static_graph={int(static_graph)} find_unused_parameters={int(find_unused)} first:",
                  ddp._get_ddp_logging_data()["bucket_sizes"], "|", indices, flush=True)
            del ddp
        dist.destroy_process_group()


def print_zero_partition(spec):
    """ZeroRedundancyOptimizer's partition of a model's parameters at WORLD ranks: the elements
    each rank owns, "a | b | ...". Its own _partition_parameters(), run in one process with
    world_size set to WORLD (the partition reads nothing else of the group)."""
    model_name, world = spec.split(",")
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("gloo", init_method="file://" + os.path.join(tmp, "store"), rank=0, world_size=1)
        zero = ZeroRedundancyOptimizer(MODELS[model_name]().parameters(), optimizer_class=torch.optim.SGD, lr=0.1)
        zero.world_size = int(world)
        zero._partition_parameters_cache = []
        shards = zero._partition_parameters()
        print("elements per rank " + " | ".join(str(sum(p.numel() for g in groups for p in g["params"])) for groups in shards))
        dist.destroy_process_group()


def print_sampler(spec):
    """One line of indices per rank, then "--"."""
    n, world, seed, epoch, shuffle, drop_last = (int(v) for v in spec.split(","))
    for r in range(world):
        s = DistributedSampler(range(n), num_replicas=world, rank=r, shuffle=bool(shuffle), seed=seed,
                               drop_last=bool(drop_last))
        s.set_epoch(epoch)
        print(" ".join(str(i) for i in s))
    print("--")


def add_training_arguments(ap, models):
    """The flags the trainers' references share (this one's and fsdp_reference.py's): the run
    they replay, as 05_ddp and 07_fsdp take them, and the comparison."""
    ap.add_argument("--init")
    ap.add_argument("--compare")
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--model", default="mlp", choices=models)
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--train-samples", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--max-steps", type=int, default=10**9)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--grad-accum", type=int, default=1)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--optimizer", choices=["sgd", "adamw"], default="sgd")
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--warmup-steps", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tolerance", type=float, default=0.0)


def main():
    # A harness that hangs (its forked ranks) says where after 40 s and exits (tests retry once).
    faulthandler.dump_traceback_later(40, exit=True)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--print-sampler", action="append", help="N,R,SEED,EPOCH,SHUFFLE,DROP_LAST; may repeat")
    ap.add_argument("--print-buckets", choices=["mlp", "cnn"], help="PyTorch DDP's bucket layout for that model")
    ap.add_argument("--print-first-buckets", action="append", choices=["mlp", "cnn"],
                    help="PyTorch DDP's first-iteration buckets for that model (may repeat), static_graph and "
                         "find_unused_parameters each off and on")
    ap.add_argument("--print-zero-partition", metavar="MODEL,WORLD", help="ZeroRedundancyOptimizer's elements per rank")
    add_training_arguments(ap, list(MODELS))
    ap.add_argument("--comm-hook", choices=["none", "fp16", "bf16", "powersgd"], default="none")
    ap.add_argument("--powersgd-rank", type=int, default=1)
    ap.add_argument("--powersgd-start-iter", type=int, default=100)
    ap.add_argument("--gradient-as-bucket-view", action="store_true")
    ap.add_argument("--find-unused-parameters", action="store_true")
    ap.add_argument("--uneven-shards", action="store_true")
    ap.add_argument("--join", action="store_true")
    ap.add_argument("--divide-by-live-ranks", action="store_true")
    ap.add_argument("--zero", action="store_true", help="ZeroRedundancyOptimizer around SGD or AdamW")
    a = ap.parse_args()
    if a.print_zero_partition:
        print_zero_partition(a.print_zero_partition)
        return 0
    if a.print_first_buckets:
        print_first_buckets(a.print_first_buckets)
        return 0
    if a.print_buckets:
        print_buckets(a.print_buckets)
        return 0
    if a.print_sampler:
        for spec in a.print_sampler:
            print_sampler(spec)
        return 0
    if not a.init or not a.compare:
        print("--init and --compare are required", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        out_file = os.path.join(tmp, "final.pt")
        run_ranks(worker, (a, os.path.join(tmp, "store"), out_file), a.world_size)
        theirs = load_list(out_file)
    return compare(load_list(a.compare), theirs, "05_ddp " + a.model, a.world_size, a.tolerance)


if __name__ == "__main__":
    sys.exit(main())
