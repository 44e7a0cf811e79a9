#!/usr/bin/python3
"""Draws one DDP step of a real 05_ddp run from its --trace (forward, backward, when each
gradient became ready, each bucket's all-reduce, what was left exposed after backward), and
ddp_sim's step for the same configuration beneath it.

Usage: bench/plot_step.py --trace runs/05_picture/trace.json --out runs/05_picture/step.png
  --trace: the merged trace that `05_ddp --trace FILE` writes at the end (every rank's events)
  --profile: the model's profile for ddp_sim (default bench/profiles/cnn.json); the trace's
             gradient sizes must be its parameters'
  --ddp-sim: the simulator (default build-cpu/ddp_sim); --dump-drawn FILE: every bar and mark as
             drawn (tests/pictures_test.py compares them with the trace)
  --figures FILE: the figures of the step drawn, as JSON (Note [One reference step] below)
  --interference S, --allreduce-slowdown A: ddp_sim's shares (measured by allreduce_bench
             --interference; a negative one, noise, is drawn as 0), or --interference-log FILE:
             that program's output, the shares read from it. The simulated backward is then
             drawn hatched where it ran slowed beside an all-reduce. The trace's compute, which
             ddp_sim is given, ran beside its all-reduces already: the hatching shows where the
             slowing falls, and its size is counted twice.
The step drawn is rank 0's median step by duration, leaving out the first (one bucket, then
rebuilt: Note [Rebuilding the buckets]). The PNG carries the sha256 of the trace, of ddp_sim's
output and of the interference log (Note [Pictures that carry their inputs] in bench/plotting.py).
"""
import json
import subprocess
import os
import re
import statistics
import sys

import plotting


def read_events(path):
    with open(path, "rb") as f:
        data = f.read()
    events = json.loads(data)
    assert isinstance(events, dict), f"{path}: not a merged trace (05_ddp --trace FILE writes one at the end)"
    return data, events["traceEvents"]


def steps_of(events, rank):
    """{step: what rank did in it}: the compute track's events from the end of the step before
    to its "step done" instant, and the bucket all-reduces that started in that window."""
    mine = sorted((e for e in events if e.get("pid") == rank and e.get("ph") in ("X", "i")), key=lambda e: e["ts"])
    steps, window = {}, []
    for e in mine:
        if e["name"] == "step done":
            step = {"number": e["args"]["step"], "ready": [], "buckets": []}
            for w in window:
                if w["name"] in ("forward", "backward", "optimizer", "wait for all-reduces"):
                    assert w["name"] not in step, f"rank {rank}: two {w['name']} in step {step['number']} (--grad-accum is not drawn)"
                    step[w["name"]] = (w["ts"], w["ts"] + w["dur"])
                elif w["name"] == "gradient ready":
                    step["ready"].append((w["ts"], w["args"]["param"], w["args"]["bytes"]))
                elif w["name"].startswith("all-reduce bucket"):
                    step["buckets"].append((int(w["name"][len("all-reduce bucket"):]), w["ts"], w["ts"] + w["dur"], w["args"]["bytes"]))
            step["buckets"].sort()
            # Backward's own work ends where finish_backward starts waiting for the all-reduces.
            step["computed"] = step["wait for all-reduces"][0]
            steps[step["number"]] = step
            window = []
        else:
            window.append(e)
    return steps


def median_step(steps):
    """The step (not the first) whose forward-to-optimizer time is the median: the lower of the
    middle two when there are an even number."""
    later = sorted((s["optimizer"][1] - s["forward"][0], n) for n, s in steps.items() if n > 1)
    assert later, "the trace has no step after the first: run at least 2 steps"
    return later[(len(later) - 1) // 2][1]


def link_of(steps):
    """The all-reduce this run had, for ddp_sim: a ring of p ranks,
    time = 2(p-1) alpha + 2(p-1)/p bytes / rate, drawn through the smallest and the largest
    bucket. A bucket's time in a step is the shortest of its ranks' spans: a rank that starts
    early waits in the all-reduce for the last one to arrive, and that wait is the other rank's
    lateness, not the link's cost. Over the steps after the first, the median. Taken from the
    trace, not from bench/README.md's loopback figures: those were measured with nothing else
    running, while here the all-reduce shares the CPU with backward (on 2 cores it takes about
    twice as long), and the picture stays reproducible from the one trace file. With one bucket
    size: no latency, bytes / time."""
    world, per_bucket = len(steps), {}
    for n in steps[0]:
        if n > 1:
            for b, _, _, nbytes in steps[0][n]["buckets"]:
                spans = [end - start for r in steps for k, start, end, _ in steps[r][n]["buckets"] if k == b]
                per_bucket.setdefault(b, []).append((nbytes, min(spans)))
    points = sorted((statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)) for v in per_bucket.values())
    ring_steps, share = 2 * (world - 1), 2 * (world - 1) / world
    (b0, t0), (b1, t1) = points[0], points[-1]
    if b1 > b0 and t1 > t0 and t0 - (t1 - t0) / (b1 - b0) * b0 >= 0:
        per_byte = (t1 - t0) / (b1 - b0)  # us per byte
        alpha_us = (t0 - per_byte * b0) / ring_steps
    else:
        per_byte, alpha_us = sum(t for _, t in points) / sum(b for b, _ in points), 0.0
    gbps = share / per_byte * 1e6 * 8 / 1e9
    return gbps, alpha_us


def parse_sim(text):
    """ddp_sim --timeline's figures, in ms: forward and backward compute, each bucket, the step."""
    sim = {"buckets": []}
    m = re.search(r"= forward ([0-9.]+) ms \+ backward ([0-9.]+) ms \+ optimizer ([0-9.]+) ms", text)
    sim["forward"], sim["backward"], sim["optimizer"] = (float(x) for x in m.groups())
    for m in re.finditer(r"^\s+(\d+)\s+\d+\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s", text, re.M):
        sim["buckets"].append((int(m.group(1)), float(m.group(2)), float(m.group(3)), float(m.group(4)), float(m.group(5))))
    sim["slowed"] = [(float(a), float(b)) for a, b in re.findall(r"^backward slowed beside an all-reduce: ([0-9.]+) \.\. ([0-9.]+) ms", text, re.M)]
    sim["step"] = float(re.search(r"^step: ([0-9.]+) ms", text, re.M).group(1))
    sim["backward end"] = float(re.search(r"^backward end: ([0-9.]+) ms", text, re.M).group(1))
    sim["hidden"] = float(re.search(r"^overlap share: ([0-9.]+)%", text, re.M).group(1))
    return sim


def bar(ax, y, start, end, colour, gid, label=None, height=0.6, **kw):
    """A bar from start to end (ms) on row y; a Rectangle, so --dump-drawn reads x and width back."""
    ax.barh(y, end - start, left=start, height=height, color=colour, label=label, gid=gid, **kw)


def hidden_share(step):
    """Of the time some all-reduce of this step was in flight, the part before backward's own
    work ended (Note [Overlap share] in 05_ddp/beyond/overlap.cpp, for one step), in %."""
    hidden, total = hidden_share_parts(step)
    return hidden / total * 100 if total else 0.0


def hidden_share_parts(step):
    """(hidden, in flight) in us: the two sums hidden_share divides."""
    total = hidden = 0.0
    start = end = None
    for _, s, e, _ in sorted(step["buckets"], key=lambda b: b[1]) + [(None, float("inf"), float("inf"), 0)]:
        if end is None or s > end:
            if end is not None:
                total += end - start
                hidden += max(0.0, min(end, step["computed"]) - start)
            start, end = s, e
        else:
            end = max(end, e)
    return hidden, total


# Note [One reference step]
# ~~~~~~~~~~~~~~~~~~~~~~~~~
# The pages tell one CNN step at 2 ranks in several places (05's README under its picture, the
# timelines page, docs/observing.md): how long backward took, when each bucket was ready, how
# long its all-reduce took, how much of it was hidden. Told from different runs, the same step
# had six overlap shares. So there is one reference step, the one the picture draws (rank 0's
# median step of bench/pictures/cnn_2ranks_trace.json), and its figures are written once, to
# bench/pictures/step_cnn_2ranks.figures.json, by the command that draws it. A paragraph that
# tells that step names the file (<!-- figures: ... --> above it), and Docs.EveryFigureHasItsSource
# holds every figure it gives to one of the file's values, rounded as the page writes it;
# Pictures.DrawnFromTheDataNotStale holds the file to what the trace gives now.
# The figures file is a result file (Note [Every figure has its source] in tests/test_pages.cpp):
# it holds the command that wrote it, and the machine and the date of the run it tells. That run
# is the trace's, not the drawing's (the drawing only reads it, and the same trace gives the same
# file anywhere): the date is the trace's last commit, and the CPU the machine it was recorded on,
# which the trace does not carry, so TRACE_MACHINES says it for the checked-in trace.
TRACE_MACHINES = {"cnn_2ranks_trace.json": "Intel Xeon, 2 cores, x86_64 (a 12-step 05_ddp --trace run at 2 ranks)"}


def trace_source(trace):
    """command, cpu and date of the figures of step_cnn_2ranks.figures.json and of another trace's."""
    name = os.path.basename(trace)
    try:
        date = subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(trace)), "log", "-1", "--format=%cs", "--", name],
                              capture_output=True, text=True).stdout.strip()
    except OSError:
        date = ""
    reference = ("bench/plot_step.py --trace bench/pictures/cnn_2ranks_trace.json --out bench/pictures/step_cnn_2ranks.png "
                 "--figures bench/pictures/step_cnn_2ranks.figures.json --interference-log bench/pictures/cnn_2ranks_interference.log")
    return {"command": reference if name in TRACE_MACHINES else " ".join(["bench/plot_step.py"] + sys.argv[1:]),
            "cpu": TRACE_MACHINES.get(name, "the machine that recorded " + name),
            "date": date or "not in git"}


def figures_of(steps, number, sim, compute_ms):
    """The reference step's figures (ms from rank 0's clock; shares in %), rounded to 0.001."""
    r3 = lambda x: round(x, 3)  # noqa: E731
    def one(rank):
        s = steps[rank][number]
        back = s["backward"][0]
        return {
            "forward_ms": r3((s["forward"][1] - s["forward"][0]) / 1e3),
            "backward_ms": r3((s["computed"] - back) / 1e3),
            "optimizer_ms": r3((s["optimizer"][1] - s["optimizer"][0]) / 1e3),
            "exposed_ms": r3((max([s["computed"]] + [e for _, _, e, _ in s["buckets"]]) - s["computed"]) / 1e3),
            "hidden_pct": r3(hidden_share(s)),
            "buckets": [{"bucket": b, "bytes": nbytes, "mib": r3(nbytes / 2**20), "kib": r3(nbytes / 2**10),
                         "starts_ms_into_backward": r3((start - back) / 1e3), "allreduce_ms": r3((end - start) / 1e3)}
                        for b, start, end, nbytes in s["buckets"]],
        }
    later = [n for n in steps[0] if n > 1]
    spans = [hidden_share_parts(steps[0][n]) for n in later]
    return {
        "what": "rank 0's median step of bench/pictures/cnn_2ranks_trace.json (bench/plot_step.py, Note [One reference step])",
        "step": number, "steps_traced": len(steps[0]), "ranks": len(steps),
        "rank0": one(0), "rank1": one(1) if 1 in steps else None,
        "rank0_hidden_pct_steps_after_the_first": r3(sum(h for h, _ in spans) / sum(t for _, t in spans) * 100),
        "simulated": {"compute_ms": r3(compute_ms), "hidden_pct": sim["hidden"], "step_ms": sim["step"]},
    }


def main():
    ap = plotting.arguments(__doc__)
    ap.add_argument("--trace", required=True)
    ap.add_argument("--figures")
    ap.add_argument("--profile", default=os.path.join(plotting.ROOT, "bench", "profiles", "cnn.json"))
    ap.add_argument("--interference", type=float, default=0)
    ap.add_argument("--allreduce-slowdown", type=float, default=0)
    ap.add_argument("--interference-log")
    a = ap.parse_args()
    inputs = {}
    if a.interference_log:
        with open(a.interference_log, "rb") as f:
            inputs["interference"] = f.read()
        text = inputs["interference"].decode()
        shares = [re.search(r"interference s = (-?[0-9.]+)$", text, re.M), re.search(r"slowdown a = (-?[0-9.]+)$", text, re.M)]
        assert all(shares), f"{a.interference_log}: no 'interference s =' and 'slowdown a =' lines (allreduce_bench --interference writes them)"
        a.interference, a.allreduce_slowdown = (float(m.group(1)) for m in shares)
    trace_bytes, events = read_events(a.trace)
    with open(a.profile) as f:
        profile = json.load(f)
    ranks = sorted({e["pid"] for e in events if e.get("name") == "step done"})
    steps = {r: steps_of(events, r) for r in ranks}
    number = median_step(steps[0])
    s0 = steps[0][number]
    for r in ranks:
        for _, param, nbytes in steps[r][number]["ready"]:
            assert profile["parameters"][param]["bytes"] == nbytes, f"the trace's gradient {param} is not {a.profile}'s"

    # 1. The simulator, fed this step's compute on rank 0 (its forward, backward and optimizer as
    # measured: the profile's FLOPs only divide backward among the layers) and the link the trace
    # measured.
    backward_ms = (s0["computed"] - s0["backward"][0]) / 1e3
    optimizer_ms = (s0["optimizer"][1] - s0["optimizer"][0]) / 1e3
    compute_ms = (s0["forward"][1] - s0["forward"][0]) / 1e3 + backward_ms + optimizer_ms
    gbps, alpha_us = link_of(steps)
    sim_args = ["--profile", a.profile, "--compute-ms", f"{compute_ms:.3f}", "--optimizer-ms", f"{optimizer_ms:.3f}",
                "--backward-ms", f"{backward_ms:.3f}", "--nodes", "1",
                "--gpus-per-node", str(len(ranks)), "--intra-gbps", f"{gbps:.4g}", "--intra-latency-us", f"{alpha_us:.4g}", "--timeline"]
    if a.interference < 0 or a.allreduce_slowdown < 0:  # noise in a measurement of nearly none
        print(f"a negative share (--interference {a.interference:g}, --allreduce-slowdown {a.allreduce_slowdown:g}) is drawn as 0")
    shares = max(0.0, a.interference), max(0.0, a.allreduce_slowdown)
    if any(shares):
        sim_args += ["--interference", f"{shares[0]:g}", "--allreduce-slowdown", f"{shares[1]:g}"]
    sim_text = plotting.ddp_sim(sim_args, a.ddp_sim)
    print("the simulated step below the measured one: ddp_sim " + " ".join(sim_args))  # to run it yourself
    sim = parse_sim(sim_text)

    # 2. The measured step, each rank on two rows (compute, all-reduce), time from rank 0's forward.
    fig = plotting.figure(10, 6)
    measured, simulated = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [2 * len(ranks), 2]})
    origin = s0["forward"][0]
    ms = lambda us: (us - origin) / 1e3  # noqa: E731
    bucket_colour = lambda b: plotting.COLOURS["buckets"][b % len(plotting.COLOURS["buckets"])]  # noqa: E731
    names = [p["name"] for p in profile["parameters"]]
    labels = []
    for i, r in enumerate(ranks):
        s, y = steps[r][number], 2 * (len(ranks) - 1 - i)
        compute_row, comm_row = y + 1, y + 0.35
        labels += [(comm_row, f"rank {r} all-reduce"), (compute_row, f"rank {r} compute")]
        first = i == 0
        bar(measured, compute_row, ms(s["forward"][0]), ms(s["forward"][1]), plotting.COLOURS["forward"], f"rank{r} forward",
            "forward" if first else None)
        bar(measured, compute_row, ms(s["backward"][0]), ms(s["computed"]), plotting.COLOURS["backward"], f"rank{r} backward",
            "backward (computing gradients)" if first else None)
        bar(measured, compute_row, ms(s["optimizer"][0]), ms(s["optimizer"][1]), plotting.COLOURS["optimizer"], f"rank{r} optimizer",
            "optimizer" if first else None)
        for b, start, end, nbytes in s["buckets"]:
            bar(measured, comm_row, ms(start), ms(end), bucket_colour(b), f"rank{r} all-reduce bucket{b}",
                f"bucket {b}'s all-reduce" if first else None, height=0.45)
            if first:
                measured.text((ms(start) + ms(end)) / 2, comm_row, f"{nbytes / 2**20:.2f} MiB", ha="center", va="center", fontsize=7)
        last_end = max([s["computed"]] + [end for _, _, end, _ in s["buckets"]])  # nothing exposed: a bar of width 0
        bar(measured, y + 0.675, ms(s["computed"]), ms(last_end), plotting.COLOURS["exposed"], f"rank{r} exposed",
            "exposed: all-reduce after backward (the rank waits)" if first else None, height=1.3, alpha=0.25, zorder=0)
        ready = sorted(s["ready"])
        measured.plot([ms(t) for t, _, _ in ready], [compute_row + 0.42] * len(ready), "v", color="black", markersize=4,
                      gid=f"rank{r} gradient ready", label="a gradient ready (its hook fires)" if first else None)
        if first:  # each layer's name once, at its first gradient, on two heights so that neighbours do not overlap
            seen = []
            for t, param, _ in ready:
                layer = names[param].split(".")[0]
                if layer not in seen:
                    seen.append(layer)
                    measured.text(ms(t), compute_row + (0.58 if len(seen) % 2 else 0.8), layer, ha="center", fontsize=7)
    measured.set_yticks([y for y, _ in labels], [t for _, t in labels])
    measured.set_ylim(-0.2, 2 * len(ranks) + 0.2)
    measured.set_title(f"Measured: 05_ddp, CNN, {len(ranks)} ranks on one CPU, step {number} (rank 0's median of the "
                       f"{len(steps[0]) - 1} steps after the first)\nrank 0 hid {hidden_share(s0):.0f} % of its all-reduce "
                       "time behind backward; marks: each gradient ready (its hook fires)")

    # 3. The simulated step: one rank stands for all.
    bar(simulated, 1, 0, sim["forward"], plotting.COLOURS["forward"], "sim forward")
    bar(simulated, 1, sim["forward"], sim["backward end"], plotting.COLOURS["backward"], "sim backward")
    sim_last = max([sim["backward end"]] + [end for _, _, _, _, end in sim["buckets"]])
    bar(simulated, 1, sim_last, sim["step"], plotting.COLOURS["optimizer"], "sim optimizer")
    for k, (start, end) in enumerate(sim["slowed"]):
        bar(simulated, 1, start, end, "none", f"sim slowed{k}", hatch="///", edgecolor="black", linewidth=0,
            label="backward slowed beside an all-reduce (the simulator)" if k == 0 else None)
    for b, mib, ready, start, end in sim["buckets"]:
        bar(simulated, 0.35, start, end, bucket_colour(b), f"sim all-reduce bucket{b}", height=0.45)
    if sim_last > sim["backward end"]:
        bar(simulated, 0.675, sim["backward end"], sim_last, plotting.COLOURS["exposed"], "sim exposed", height=1.3, alpha=0.25, zorder=0)
    simulated.plot([ready for _, _, ready, _, _ in sim["buckets"]], [1.42] * len(sim["buckets"]), "D", color="dimgray", markersize=4,
                   gid="sim bucket ready", label="a bucket ready (the simulator)")
    simulated.set_yticks([0.35, 1], ["all-reduce", "compute"])
    simulated.set_ylim(-0.2, 1.9)
    simulated.set_title(f"Simulated: ddp_sim, rank 0's compute of this step ({compute_ms:.1f} ms) and the trace's all-reduce "
                        f"({gbps:.2f} Gb/s, {alpha_us:.0f} µs a ring step)\nit hides {sim['hidden']:.0f} % of the all-reduce; "
                        "marks: each bucket ready" + (f"\nmeasured apart: backward {shares[0]:.0%} slower beside an all-reduce "
                                                      f"(hatched), an all-reduce {shares[1]:.0%} slower beside backward"
                                                      if any(shares) else ""))
    simulated.set_xlabel("time since rank 0's forward began (ms)")
    for ax in (measured, simulated):
        ax.grid(axis="x", alpha=0.3)
    handles, names_ = measured.get_legend_handles_labels()
    more = simulated.get_legend_handles_labels()
    fig.legend(handles + more[0], names_ + more[1], loc="lower center", ncol=3, frameon=False)
    fig.suptitle("One DDP step: the all-reduce of each bucket runs while backward computes the next gradients")
    fig.tight_layout(rect=(0, 0.1, 1, 1))

    plotting.save(fig, a.out, {"trace": trace_bytes, "ddp_sim": sim_text, **inputs}, "bench/plot_step.py --trace " + os.path.basename(a.trace))
    if a.figures:
        with open(a.figures, "w") as f:
            json.dump({**trace_source(a.trace), **figures_of(steps, number, sim, compute_ms)}, f, indent=1)
            f.write("\n")
    if a.dump_drawn:
        plotting.dump_drawn(fig, a.dump_drawn, {"step": number, "ddp_sim_args": sim_args})


if __name__ == "__main__":
    main()
