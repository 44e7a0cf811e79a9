#!/usr/bin/python3
"""The pictures of bench/pictures/ are drawn from the data and are not stale (Note [Pictures that
carry their inputs] in bench/plotting.py):
  1. the scaling and bucket-sweep pictures, redrawn from ddp_sim now, carry the same input hash
     as the checked-in ones: a changed simulator, preset or profile makes them stale, and the
     failure names the command that redraws them; the scaling points are the table's figures;
  2. a fresh 2-rank CNN run's trace, drawn by bench/plot_step.py: every bar and mark of the
     measured step is where the trace, read here on its own, puts it, and every bar of the
     simulated step is ddp_sim's timeline for rank 0's compute of that step;
  3. the step picture that 05's README shows carries the sha256 of the checked-in trace, and of
     ddp_sim's output for it now; the figures of that step the pages quote
     (step_cnn_2ranks.figures.json) are what the two give now.
Usage: tests/pictures_test.py 05_DDP DDP_SIM (the built programs)
"""
import hashlib
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PICTURES = os.path.join(ROOT, "bench", "pictures")
failures = []


def check(ok, what):
    print(("ok: " if ok else "FAILED: ") + what)
    if not ok:
        failures.append(what)


def png_text(path):
    """A PNG's tEXt chunks: keyword -> text."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    text, i = {}, 8
    while i < len(data):
        length, kind = struct.unpack(">I4s", data[i:i + 8])
        if kind == b"tEXt":
            key, value = data[i + 8:i + 8 + length].split(b"\0", 1)
            text[key.decode("latin-1")] = value.decode("latin-1")
        i += 12 + length
    return text


def sha256_file(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def run(*cmd):
    subprocess.run(cmd, check=True, cwd=ROOT)


def close(a, b):
    return abs(a - b) < 1e-6


def expected_step(events, rank, step, origin):
    """What the picture must show for one rank's step, in ms from `origin` (us)."""
    done = {e["args"]["step"]: e["ts"] for e in events if e.get("pid") == rank and e.get("name") == "step done"}
    low, high = done.get(step - 1, float("-inf")), done[step]
    mine = [e for e in events if e.get("pid") == rank and e.get("ph") in ("X", "i") and low < e["ts"] <= high]
    span = {e["name"]: e for e in mine if e["ph"] == "X"}
    ms = lambda us: (us - origin) / 1e3  # noqa: E731
    wait = span["wait for all-reduces"]["ts"]
    bars = {
        "forward": (ms(span["forward"]["ts"]), span["forward"]["dur"] / 1e3),
        "backward": (ms(span["backward"]["ts"]), (wait - span["backward"]["ts"]) / 1e3),
        "optimizer": (ms(span["optimizer"]["ts"]), span["optimizer"]["dur"] / 1e3),
    }
    ends = [wait]
    for e in mine:
        if e["name"].startswith("all-reduce bucket"):
            bars[e["name"]] = (ms(e["ts"]), e["dur"] / 1e3)
            ends.append(e["ts"] + e["dur"])
    bars["exposed"] = (ms(wait), (max(ends) - wait) / 1e3)
    ready = sorted(ms(e["ts"]) for e in mine if e["name"] == "gradient ready")
    return bars, ready


def check_step_picture(trace, png, dump, ddp_sim):
    with open(trace) as f:
        events = json.load(f)["traceEvents"]
    with open(dump) as f:
        d = json.load(f)
    drawn = d["drawn"]
    # The step: rank 0's median forward-to-optimizer time among the steps after the first.
    spans = {}
    for e in events:
        if e.get("pid") == 0 and e.get("name") in ("forward", "optimizer"):
            spans.setdefault(e["name"], []).append(e)
    done = sorted((e["ts"], e["args"]["step"]) for e in events if e.get("pid") == 0 and e.get("name") == "step done")
    durations = []
    for (ts, step), prev in zip(done, [(float("-inf"), 0)] + done):
        fwd = [e for e in spans["forward"] if prev[0] < e["ts"] <= ts][0]
        opt = [e for e in spans["optimizer"] if prev[0] < e["ts"] <= ts][0]
        if step > 1:
            durations.append((opt["ts"] + opt["dur"] - fwd["ts"], step, fwd, opt))
    durations.sort(key=lambda t: t[:2])
    _, step, fwd, opt = durations[(len(durations) - 1) // 2]
    check(d["step"] == step, f"the step drawn is rank 0's median step {step} (drawn: {d['step']})")
    for rank in (0, 1):
        bars, ready = expected_step(events, rank, step, fwd["ts"])
        for name, (x, width) in bars.items():
            got = drawn.get(f"rank{rank} {name}")
            check(got is not None and close(got["x"], x) and close(got["width"], width),
                  f"rank {rank}'s {name}: drawn {got}, the trace says x {x:.6f} ms, width {width:.6f} ms")
        got = drawn.get(f"rank{rank} gradient ready", {}).get("x")
        check(got is not None and len(got) == len(ready) and all(close(a, b) for a, b in zip(got, ready)),
              f"rank {rank}'s {len(ready)} gradient-ready marks where the trace puts them")
    check(png_text(png).get("Input trace sha256") == sha256_file(trace), f"{png} carries the sha256 of {trace}")
    # The simulated step: rank 0's compute of this step, and ddp_sim's own timeline.
    args = d["ddp_sim_args"]
    bars0, _ = expected_step(events, 0, step, fwd["ts"])
    compute = bars0["forward"][1] + bars0["backward"][1] + bars0["optimizer"][1]
    given = float(args[args.index("--compute-ms") + 1])
    check(abs(given - compute) < 0.0006, f"ddp_sim's --compute-ms {given} is rank 0's forward + backward + optimizer, {compute:.4f} ms")
    text = subprocess.run([ddp_sim, *args], check=True, capture_output=True, text=True).stdout
    for m in re.finditer(r"^\s+(\d+)\s+\d+\s+[0-9.]+\s+[0-9.]+\s+([0-9.]+)\s+([0-9.]+)\s", text, re.M):
        got, start, end = drawn.get(f"sim all-reduce bucket{m.group(1)}"), float(m.group(2)), float(m.group(3))
        check(got is not None and close(got["x"], start) and close(got["width"], end - start),
              f"the simulated bucket {m.group(1)}: drawn {got}, ddp_sim's timeline {start} to {end} ms")
    end = float(re.search(r"^backward end: ([0-9.]+) ms", text, re.M).group(1))
    got = drawn.get("sim backward")
    check(got is not None and close(got["x"] + got["width"], end), f"the simulated backward ends at ddp_sim's {end} ms")


def main():
    trainer, ddp_sim = (os.path.abspath(p) for p in sys.argv[1:3])
    with tempfile.TemporaryDirectory(prefix="ddp-pictures-") as scratch:
        # 1. The simulator's pictures against the simulator now.
        for script, name in (("plot_scaling.py", "scaling_dgx1.png"), ("plot_buckets.py", "buckets_dgx1.png")):
            fresh, dump = os.path.join(scratch, name), os.path.join(scratch, name + ".json")
            run(os.path.join(ROOT, "bench", script), "--out", fresh, "--ddp-sim", ddp_sim, "--dump-drawn", dump)
            key = "Input ddp_sim sha256"
            check(png_text(os.path.join(PICTURES, name)).get(key) == png_text(fresh).get(key),
                  f"bench/pictures/{name} is drawn from what ddp_sim prints now (if not, redraw it: "
                  f"bench/{script} --out bench/pictures/{name})")
        table = subprocess.run([ddp_sim, "--table", "pytorch-dgx1"], check=True, capture_output=True, text=True).stdout
        with open(os.path.join(scratch, "scaling_dgx1.png.json")) as f:
            drawn = json.load(f)["drawn"]
        for model in ("resnet50", "resnet101"):
            rows = [line.split("|") for line in table.split("DDP's overhead")[0].splitlines()
                    if line.startswith(f"| {model} |") and "no DDP" not in line]
            for kind, column in (("predicted", 3), ("published", 4)):
                want = [float(r[column]) * 1e3 for r in rows]
                got = drawn[f"{model} {kind}"]["y"]
                check(len(got) == 5 and all(close(a, b) for a, b in zip(got, want)), f"{model}'s {kind} points are the table's, {want} ms")

        # 2. A fresh trace, drawn and compared with the trace itself.
        out = os.path.join(scratch, "run")
        trace = os.path.join(out, "trace.json")
        run(trainer, "--nproc-per-node", "2", "--model", "cnn", "--max-steps", "12", "--log-every", "1000", "--train-samples", "2000",
            "--test-samples", "200", "--timeout", "60", "--out", out, "--reset", "--trace", trace)
        png, dump = os.path.join(scratch, "step.png"), os.path.join(scratch, "step.json")
        run(os.path.join(ROOT, "bench", "plot_step.py"), "--trace", trace, "--out", png, "--ddp-sim", ddp_sim, "--dump-drawn", dump)
        check_step_picture(trace, png, dump, ddp_sim)

        # 3. The checked-in measured picture: the checked-in trace's, and ddp_sim's now.
        trace = os.path.join(PICTURES, "cnn_2ranks_trace.json")
        checked, fresh = os.path.join(PICTURES, "step_cnn_2ranks.png"), os.path.join(scratch, "step_cnn_2ranks.png")
        fresh_figures = os.path.join(scratch, "step_cnn_2ranks.figures.json")
        interference = os.path.join(PICTURES, "cnn_2ranks_interference.log")
        fresh_dump = os.path.join(scratch, "step_cnn_2ranks.json")
        run(os.path.join(ROOT, "bench", "plot_step.py"), "--trace", trace, "--out", fresh, "--ddp-sim", ddp_sim, "--figures", fresh_figures,
            "--interference-log", interference, "--dump-drawn", fresh_dump)
        redraw = ("bench/plot_step.py --trace bench/pictures/cnn_2ranks_trace.json --out bench/pictures/step_cnn_2ranks.png "
                  "--figures bench/pictures/step_cnn_2ranks.figures.json --interference-log bench/pictures/cnn_2ranks_interference.log")
        # Backward drawn hatched where ddp_sim, given the measured shares, slowed it.
        with open(fresh_dump) as f:
            d = json.load(f)
        text = subprocess.run([ddp_sim, *d["ddp_sim_args"]], check=True, capture_output=True, text=True).stdout
        slowed = [(float(a), float(b)) for a, b in re.findall(r"^backward slowed beside an all-reduce: ([0-9.]+) \.\. ([0-9.]+) ms", text, re.M)]
        check(slowed and "--interference" in d["ddp_sim_args"], f"the reference step's simulator is given the measured shares and slows backward: {d['ddp_sim_args']}")
        for k, (a, b) in enumerate(slowed):
            got = d["drawn"].get(f"sim slowed{k}")
            check(got is not None and close(got["x"], a) and close(got["width"], b - a), f"backward slowed {a} to {b} ms: drawn {got}")
        for key in ("Input trace sha256", "Input ddp_sim sha256", "Input interference sha256"):
            check(png_text(checked).get(key) == png_text(fresh).get(key),
                  f"bench/pictures/step_cnn_2ranks.png's {key} is its inputs' now (if not, redraw it: {redraw})")
        # The reference step's figures, which the pages quote (Note [One reference step] in
        # bench/plot_step.py), are the trace's and ddp_sim's now.
        with open(os.path.join(PICTURES, "step_cnn_2ranks.figures.json")) as f, open(fresh_figures) as g:
            check(json.load(f) == json.load(g),
                  f"bench/pictures/step_cnn_2ranks.figures.json is what the trace and ddp_sim give now (if not: {redraw})")
        for name in sorted(os.listdir(PICTURES)):
            if name.endswith(".png"):
                size = os.path.getsize(os.path.join(PICTURES, name))
                check(size < 150_000, f"bench/pictures/{name} is small: {size} bytes")
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
