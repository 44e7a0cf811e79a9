"""torchft itself on chapter 08's task, as a reference: its lighthouse, Manager, fault-tolerant
DistributedDataParallel and Optimizer, two replica groups of one rank on Gloo (CPU), the toy task
of chapters 03-04 from the initial parameters a C++ run saved (--init), the data position kept as
08 keeps it (each committed step consumes num_participants x batch samples; participant j takes the
j-th slice). With --kill-at K, replica 1 exits at the start of step K, before it asks for that
step's quorum; replica 0 goes on alone. Compares replica 0's final parameters with the C++ run's
(--compare), prints the largest absolute difference, and the time from the kill to replica 0's
next committed step. With --sync-every H --outer-lr L, torchft's DiLoCo instead (its Manager with a
synchronous quorum, a plain inner optimizer, an outer SGD with Nesterov momentum; Note [DiLoCo]),
without a fault: each replica takes the slice of its index every step. Exit code 0 within
--tolerance, 1 otherwise, 2 on bad input (or no torchft).

  python tests/torchft_reference.py --init init.pt --compare params.r0.pt --kill-at 8 --tolerance 0
  python tests/torchft_reference.py --init init.pt --compare params.r0.pt --sync-every 4 --outer-lr 0.7 --tolerance 0
"""
import argparse
import os
import sys
import tempfile
import time

os.environ["OPENBLAS_NUM_THREADS"] = "1"  # as tests/ddp_reference.py: one BLAS thread

import torch  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from ddp_reference import batch  # noqa: E402  the formula of common/data/toy_task.cpp
from reference_util import compare, load_list  # noqa: E402

FEATURES, HIDDEN = 8, 16


def replica(rid, args, lighthouse, out_dir, port, ready):
    import datetime

    import torch.distributed as dist
    from torch import nn
    from torchft import DistributedDataParallel, Manager, Optimizer, ProcessGroupGloo
    from torchft.local_sgd import DiLoCo

    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, 1))
    with torch.no_grad():
        for p, t in zip(model.parameters(), load_list(args.init)):
            p.copy_(t)
    inner = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    position = 0

    def state_dict():
        return {"model": model.state_dict(), "optim": inner.state_dict(), "position": position}

    def load_state_dict(sd):
        nonlocal position
        model.load_state_dict(sd["model"])
        inner.load_state_dict(sd["optim"])
        position = sd["position"]

    # torchft's Manager joins its replica group through MASTER_ADDR/MASTER_PORT as a client:
    # torchrun would host that store; here each replica group of one hosts its own.
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1", TORCHFT_LIGHTHOUSE=lighthouse)
    store = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)  # noqa: F841 (kept alive)
    timeout = datetime.timedelta(seconds=20)
    manager = Manager(pg=ProcessGroupGloo(timeout=timeout), min_replica_size=1, load_state_dict=load_state_dict,
                      state_dict=state_dict, replica_id=f"r{rid}", init_sync=False,  # all start equal, as 08's replicas
                      timeout=timeout, quorum_timeout=timeout, connect_timeout=timeout,
                      use_async_quorum=not args.sync_every)  # DiLoCo asks for a synchronous one
    # Both heartbeat before either asks, so the first quorum waits for both (a quorum of the
    # first alone would train ahead, and the other would heal before it ever trained).
    ready.wait()
    log = open(os.path.join(out_dir, f"r{rid}.txt"), "w", buffering=1)
    if args.sync_every:  # DiLoCo: hooks on the inner optimizer's step sync every H steps
        outer = torch.optim.SGD(model.parameters(), lr=args.outer_lr, momentum=args.outer_momentum,
                                nesterov=args.outer_momentum > 0)
        with DiLoCo(manager, [model], inner, outer, sync_every=args.sync_every):
            for step in range(args.steps):
                inner.zero_grad()
                x, y = batch(position // args.batch + rid, 0, args.batch, 1)
                nn.functional.mse_loss(model(x), y).backward()
                inner.step()
                position += 2 * args.batch
        log.write(f"syncs {manager.current_step()}\n")
        torch.save([p.detach().clone() for p in model.parameters()], os.path.join(out_dir, f"final{rid}.pt"))
        log.close()
        os._exit(0)
    ddp = DistributedDataParallel(manager, model)
    opt = Optimizer(manager, inner)
    while manager.current_step() < args.steps:
        if rid == 1 and manager.current_step() == args.kill_at:
            log.write(f"killed {time.monotonic()}\n")
            os._exit(9)
        opt.zero_grad()  # starts this step's quorum
        j, n = manager.participating_rank(), manager.num_participants()
        x, y = batch(position // args.batch + j, 0, args.batch, 1)
        nn.functional.mse_loss(ddp(x), y).backward()
        before = manager.current_step()
        opt.step()  # applied only if this replica group's should_commit() says so
        if manager.current_step() > before:
            log.write(f"step {before} participants {n} at {time.monotonic()}\n")
            position += n * args.batch
    if rid == 0:
        torch.save([p.detach().clone() for p in model.parameters()], os.path.join(out_dir, "final.pt"))
    log.close()
    sys.stdout.flush()
    os._exit(0)  # torchft's threads and the Gloo group are not torn down: what is compared is saved


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--init", required=True)
    ap.add_argument("--compare", required=True)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--momentum", type=float, default=0.0)
    ap.add_argument("--kill-at", type=int, default=-1)
    ap.add_argument("--heartbeat-timeout-ms", type=int, default=5000, help="torchft's default")
    ap.add_argument("--sync-every", type=int, default=0, help="DiLoCo: sync every H inner steps")
    ap.add_argument("--outer-lr", type=float, default=0.7)
    ap.add_argument("--outer-momentum", type=float, default=0.9)
    ap.add_argument("--tolerance", type=float, required=True)
    args = ap.parse_args()
    if args.sync_every and args.kill_at >= 0:
        print("torchft_reference: --kill-at is not combined with --sync-every here", file=sys.stderr)
        return 2
    for path in (args.init, args.compare):
        if not os.path.isfile(path):
            print(f"torchft_reference: no such file: {path}", file=sys.stderr)
            return 2
    try:
        from torchft.coordination import LighthouseServer
    except ImportError as e:
        print(f"torchft_reference: torchft is not installed here ({e}): scripts/setup.sh cuda installs it", file=sys.stderr)
        return 2
    import socket

    def free_port():
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        return port

    lighthouse = LighthouseServer(bind="[::]:0", min_replicas=1, join_timeout_ms=2000,
                                  heartbeat_timeout_ms=args.heartbeat_timeout_ms)
    with tempfile.TemporaryDirectory() as tmp:
        ctx = mp.get_context("spawn")
        ready = ctx.Barrier(2)
        procs = [ctx.Process(target=replica, args=(r, args, lighthouse.address(), tmp, free_port(), ready)) for r in (0, 1)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(120)
        lighthouse.shutdown()
        codes = [p.exitcode for p in procs]
        if codes[0] != 0 or codes[1] != (9 if args.kill_at >= 0 else 0):
            print(f"torchft_reference: the replicas exited {codes}", file=sys.stderr)
            return 1
        if args.kill_at >= 0:
            killed = float(open(os.path.join(tmp, "r1.txt")).read().split("killed ")[1].split()[0])
            for line in open(os.path.join(tmp, "r0.txt")):
                words = line.split()
                if int(words[1]) == args.kill_at:
                    print(f"torchft: from the kill to replica 0's step {args.kill_at} committed: "
                          f"{float(words[-1]) - killed:.3f}s (participants {words[3]}, heartbeat timeout "
                          f"{args.heartbeat_timeout_ms} ms)")
        if args.sync_every:
            syncs = [open(os.path.join(tmp, f"r{r}.txt")).read().split()[1] for r in (0, 1)]
            print(f"torchft: DiLoCo committed {syncs[0]} and {syncs[1]} syncs in {args.steps} steps")
            mine = load_list(args.compare)
            worst = 0
            for r in (0, 1):  # both replicas: equal after the last sync
                worst = max(worst, compare(mine, load_list(os.path.join(tmp, f"final{r}.pt")), f"chapter 08 against replica r{r}",
                                           2, args.tolerance, reference="torchft 0.2.0's DiLoCo"))
            return worst
        theirs = load_list(os.path.join(tmp, "final.pt"))
    return compare(load_list(args.compare), theirs, "chapter 08", 2, args.tolerance, reference="torchft 0.2.0")


if __name__ == "__main__":
    sys.exit(main())
