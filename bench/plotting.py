"""What bench/plot_*.py share: a PNG that carries the hash of the data it was drawn from,
ddp_sim run for its text, and --dump-drawn (what was drawn, read back from the artists).

Note [Pictures that carry their inputs]
A checked-in picture goes stale silently: the simulator changes, the trace is re-recorded, and
the PNG still shows the old figures. So each picture records, in its PNG's text chunks (tEXt,
written by matplotlib's savefig metadata), the sha256 of every input it was drawn from: the
trace file's bytes, ddp_sim's printed text. tests/pictures_test.py recomputes those inputs and
compares. The PNG is otherwise deterministic (fixed size and dpi, Agg, no "Software" chunk and no
timestamp), so drawing it twice from the same inputs gives the same bytes.
"""
import argparse
import hashlib
import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor

import matplotlib

matplotlib.use("Agg")  # no display: the scripts run in CI and over ssh
import matplotlib.pyplot as plt  # noqa: E402 (after the backend)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# DDP_BUILD_DIR=<folder>: another build's ddp_sim, as for bench/cost_model.sh.
DDP_SIM = os.path.join(os.environ.get("DDP_BUILD_DIR") or os.path.join(ROOT, "build-cpu"), "ddp_sim")
DPI = 100
# One colour per kind of thing, the same in every picture.
COLOURS = {"forward": "#9ecae1", "backward": "#3182bd", "optimizer": "#31a354", "exposed": "#de2d26",
           "buckets": ["#fd8d3c", "#8856a7", "#e7ba52", "#636363"], "predicted": "#3182bd", "published": "#000000"}


def arguments(doc):
    """The flags every bench/plot_*.py takes (a script adds its own): --out, the PNG; --ddp-sim,
    which simulator; --dump-drawn, a JSON of what was drawn (tests/pictures_test.py reads it)."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--ddp-sim", default=DDP_SIM)
    ap.add_argument("--dump-drawn")
    return ap


def sha256(data):
    return hashlib.sha256(data if isinstance(data, bytes) else data.encode()).hexdigest()


def ddp_sim(args, binary=DDP_SIM):
    """ddp_sim's output for these flags, without its "(simulated in ...)" line: that one figure
    is the simulator's own running time, different every run; the rest is deterministic."""
    out = subprocess.run([binary, *args], check=True, capture_output=True, text=True).stdout
    return "".join(line for line in out.splitlines(keepends=True) if not line.startswith("(simulated in"))


def ddp_sims(arg_lists, binary=DDP_SIM):
    """Many ddp_sim runs, one per core at a time, their outputs in the order asked."""
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return list(pool.map(lambda a: ddp_sim(a, binary), arg_lists))


def save(fig, out, inputs, source):
    """Writes the PNG with the sha256 of each input (name -> bytes or text) and what drew it (not
    where it was written, so that the same inputs give the same bytes anywhere). See Note
    [Pictures that carry their inputs]."""
    metadata = {"Software": None, "Source": source}
    for name, data in inputs.items():
        metadata[f"Input {name} sha256"] = sha256(data)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fig.savefig(out, dpi=DPI, metadata=metadata)


def dump_drawn(fig, path, extra=None):
    """Every artist given a gid, as drawn: a bar's x and width, a line's x values (data units).
    Read from the artists after drawing, so a test compares what is on the picture."""
    drawn = {}
    for ax in fig.axes:
        for patch in ax.patches:
            if patch.get_gid():
                drawn[patch.get_gid()] = {"x": float(patch.get_x()), "width": float(patch.get_width())}
        for line in ax.lines:
            if line.get_gid():
                drawn[line.get_gid()] = {"x": [float(x) for x in line.get_xdata()], "y": [float(y) for y in line.get_ydata()]}
    with open(path, "w") as f:
        json.dump({**(extra or {}), "drawn": drawn}, f, indent=1, sort_keys=True)
        f.write("\n")


def figure(width, height):
    plt.rcParams.update({"font.size": 9, "axes.titlesize": 10, "legend.fontsize": 8})
    return plt.figure(figsize=(width, height))
