"""PyTorch's Python DDP training chapter 05's models on Fashion-MNIST, timed the way 05_ddp
times itself: samples/s of all ranks from the end of the first step to the end of the last.

  python3 bench/python_ddp.py --model mlp --world-size 2 --steps 200
"""
import argparse
import itertools
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from trainer_reference import Cnn, Mlp, learning_rate, load_split  # noqa: E402  the same models and data


def batches(a, rank, images, labels, device):
    """This rank's batches, epoch after epoch (set_epoch reshuffles, as 05_ddp's sampler): a
    DataLoader on the CPU (copied to the GPU batch by batch with --data copy), or, with --data
    resident, the dataset on the GPU and batches picked there."""
    data = TensorDataset(images, labels)
    sampler = DistributedSampler(data, shuffle=True, seed=0)
    resident = device.type == "cuda" and a.data == "resident"
    if resident:
        images, labels = images.to(device), labels.to(device)
    for epoch in itertools.count():
        sampler.set_epoch(epoch)
        if resident:
            order = torch.tensor(list(sampler), device=device)
            for k in range(0, len(order), a.batch_size):
                sel = order[k:k + a.batch_size]
                yield images.index_select(0, sel), labels.index_select(0, sel)
            continue
        for x, y in DataLoader(data, batch_size=a.batch_size, sampler=sampler, pin_memory=device.type == "cuda"):
            yield x.to(device, non_blocking=True), y.to(device, non_blocking=True)


def worker(rank, a, port, result):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    device = torch.device("cuda", rank) if a.device == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=rank, world_size=a.world_size)
    images, labels = load_split(a.data_dir, True, 0)
    torch.manual_seed(0)
    model = (Cnn() if a.model == "cnn" else Mlp()).to(device)
    model = DDP(model, device_ids=[rank] if device.type == "cuda" else None)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    first_done = None
    for step, (x, y) in enumerate(batches(a, rank, images, labels, device)):
        if step == a.steps:
            break
        for g in opt.param_groups:
            g["lr"] = learning_rate(a, step, a.steps)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        if device.type == "cpu" or (step + 1) % a.log_every == 0 or step + 1 == a.steps:
            loss.item()  # 05_ddp reads the loss every step on the CPU, on log steps on a GPU
        opt.step()
        if first_done is None:
            if device.type == "cuda":
                torch.cuda.synchronize()
            first_done = time.monotonic()
    if device.type == "cuda":
        torch.cuda.synchronize()
    elapsed = time.monotonic() - first_done
    if rank == 0:
        result.put((a.steps - 1) * a.batch_size * a.world_size / elapsed)
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--warmup-steps", type=int, default=100)
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="cuda: NCCL, one rank per GPU")
    ap.add_argument("--data", choices=["copy", "resident"], default="copy",
                    help="on a GPU: copy each batch from a DataLoader, or keep the dataset on the GPU")
    ap.add_argument("--log-every", type=int, default=100, help="on a GPU: read the loss every N steps, as 05_ddp")
    a = ap.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    result = ctx.SimpleQueue()
    mp.spawn(worker, args=(a, port, result), nprocs=a.world_size, join=True)
    print(f"throughput: {result.get():.1f} samples/s over {a.steps - 1} steps "
          f"(torch {torch.__version__}, {torch.get_num_threads()} threads per rank)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
