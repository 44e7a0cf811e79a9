#!/usr/bin/python3
"""Does an all-reduce slow the compute that follows it? Two ranks over loopback, one thread each.

Each step computes forward and backward of one of chapter 05's models (the Python twins in
tests/trainer_reference.py, 64 images), then either all-reduces its gradients (flattened, Gloo)
or only meets the other rank at a barrier (no bytes moved): the two ways alternate in rounds,
and the compute is timed alone in both. No DDP. On a GPU the two share only memory bandwidth;
on a CPU the all-reduce's bytes pass through the same cores and caches the next step computes
with. ddp_sim leaves this out (Note [Two ranks on two cores] in bench/one_vs_two_ranks.sh names
it); bench/README.md reports it beside the simulator's predictions.

Usage: bench/compute_after_allreduce.py [--model mlp|cnn|cnn_bn] [--steps 200] [--rounds 3]
Writes its figures to results/compute_after_allreduce_mlp.json (compute_after_allreduce_cnn.json,
compute_after_allreduce_cnn_bn.json: compute_after_allreduce_MODEL.json; bench/results.py), which
the pages cite.
"""
import argparse
import datetime
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


from profile_model import COURSE_MODELS, build
from results import write_result  # the course's models, as its profiles are written from


def rank_main(rank, store, name, steps, rounds, results):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=2, timeout=datetime.timedelta(seconds=60))
    torch.manual_seed(0)
    model = build(name)[0]
    images, labels = torch.randn(64, 1, 28, 28), torch.randint(0, 10, (64,))
    flat = torch.zeros(sum(p.numel() for p in model.parameters()))
    times = {"barrier": [], "all-reduce": []}
    comm = []
    for r in range(2 * rounds):
        way = "barrier" if r % 2 == 0 else "all-reduce"
        for s in range(steps):
            t0 = time.perf_counter()
            model.zero_grad(set_to_none=False)
            torch.nn.functional.cross_entropy(model(images), labels).backward()
            t1 = time.perf_counter()
            if s >= 10:  # the first steps of a round warm up
                times[way].append((t1 - t0) * 1e3)
            if way == "barrier":
                dist.barrier()
            else:
                torch.cat([p.grad.reshape(-1) for p in model.parameters()], out=flat)
                t2 = time.perf_counter()
                dist.all_reduce(flat)
                comm.append((time.perf_counter() - t2) * 1e3)
    if rank == 0:
        results.put((times, comm, flat.numel() * 4))  # a SimpleQueue: written to the pipe before put returns
    # Ended as tests/reference_util.py's leave() ends a reference rank: a barrier, then os._exit(0),
    # which skips PyTorch's teardown. After destroy_process_group, Debian's torch 1.13 ended a rank
    # in "terminate called without an active exception" as the interpreter exited (exit -6), in 1
    # of 10 runs here and 2 of 4 under the tests: in its teardown, not in what is measured.
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mlp", help=f"one of the course's models, {', '.join(COURSE_MODELS)} (default mlp)")
    parser.add_argument("--steps", type=int, default=200, help="steps per round (default 200)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each way, alternating (default 3)")
    args = parser.parse_args()
    if args.model not in COURSE_MODELS:
        print(f"compute_after_allreduce.py: --model {args.model}: one of the course's models, {', '.join(COURSE_MODELS)}",
              file=sys.stderr)
        return 2
    if args.steps < 20 or args.rounds < 1:
        print("compute_after_allreduce.py: --steps must be at least 20 and --rounds at least 1", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        ctx = mp.get_context("spawn")
        results = ctx.SimpleQueue()
        procs = [ctx.Process(target=rank_main, args=(r, os.path.join(tmp, "store"), args.model, args.steps, args.rounds, results)) for r in range(2)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(300)
        failed = [f"rank {r}: exit {p.exitcode}" for r, p in enumerate(procs) if p.exitcode != 0]
        if failed:
            for p in procs:
                p.kill()
            print("compute_after_allreduce.py: " + ", ".join(failed), file=sys.stderr)
            return 1
        times, comm, nbytes = results.get()
    med = {way: statistics.median(t) for way, t in times.items()}
    for way, t in times.items():
        print(f"rank 0, {args.model} forward and backward after the {way:10s}: median {med[way]:.3f} ms, mean {statistics.mean(t):.3f} ms ({len(t)} steps)")
    print(f"rank 0, the all-reduce of {nbytes} bytes: median {statistics.median(comm):.3f} ms, mean {statistics.mean(comm):.3f} ms")
    print(f"compute after an all-reduce / after a barrier: {med['all-reduce'] / med['barrier']:.2f}x (medians)")
    write_result(f"compute_after_allreduce_{args.model}",
                 f"bench/compute_after_allreduce.py --model {args.model} --steps {args.steps} --rounds {args.rounds}",
                 {"model": args.model, "steps": args.steps, "rounds": args.rounds,
                  "after_barrier_median_ms": round(med["barrier"], 3), "after_allreduce_median_ms": round(med["all-reduce"], 3),
                  "allreduce_bytes": nbytes, "allreduce_median_ms": round(statistics.median(comm), 3),
                  "after_allreduce_over_after_barrier": round(med["all-reduce"] / med["barrier"], 4)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
