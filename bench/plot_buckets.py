#!/usr/bin/python3
"""Draws the bucket-size sweep: ddp_sim's predicted step for ResNet-50 and ResNet-101 on DGX-1
V100 at 8 and 16 GPUs over bucket caps from 0.25 to 100 MiB, as a change against the default
25 MiB, with PyTorch's published bucket_cap_mb=1 change as points.

Usage: bench/plot_buckets.py --out runs/pictures/buckets_dgx1.png [--ddp-sim build-cpu/ddp_sim]
  [--dump-drawn FILE] [--result]
--result: also write the curves' figures (each cap's change against 25 MiB, in %) to
results/bucket_sweep_dgx1.json (bench/results.py), which bench/ddp_table.md cites.
The inputs are those of `ddp_sim --table pytorch-dgx1` (bench/ddp_table.md): --preset dgx-v100,
the table's "1 GPU, no DDP" figure as --compute-ms, and its calibration, DDP's cost per
gradient, as --per-param-us. Two bucketings: PyTorch 1.4's, which the table used (cut in
registration order, launched reversed), and today's (rebuilt in the order gradients become
ready, PyTorch >= 1.5 and chapter 05), at 16 GPUs, where its cap matters most. The PNG carries
the sha256 of every ddp_sim output it was drawn from (Note [Pictures that carry their inputs]).
"""
import json
import os
import re

import plotting
from plot_scaling import NAMES

CAPS = [0.25, 0.5, 1, 2, 5, 10, 25, 50, 100]
# (bucketing, GPUs): 55 ddp_sim runs in all.
SERIES = [("pytorch-1.4", 8), ("pytorch-1.4", 16), ("rebuilt", 16)]


def table_inputs(table):
    """From the table's text: per model the compute (s), the per-gradient cost (us) and the
    published bucket_cap_mb=1 change (%) at each GPU count."""
    models = {}
    for m in re.finditer(r"^\| (\w+) \| 1, no DDP \| [0-9.]+ \| ([0-9.]+) \|", table, re.M):
        models[m.group(1)] = {"compute_s": float(m.group(2)), "cap1_pct": {}}
    for m in re.finditer(r"^\| (\w+) \| 1 \| [0-9.]+ \| ([0-9.]+) \| calibration \(([0-9.]+) us", table, re.M):
        row = models[m.group(1)]
        # The printed cost is rounded to 0.01 us; the table computes it from the same two
        # published 1-GPU figures over the profile's parameters, and so does this (Note [The
        # PyTorch DGX-1 table] in bench/ddp_sim_presets.cpp), so that cap 25 here is the table's cell.
        with open(os.path.join(plotting.ROOT, "bench", "profiles", m.group(1) + ".json")) as f:
            params = len(json.load(f)["parameters"])
        row["per_param_us"] = (float(m.group(2)) - row["compute_s"]) / params * 1e6
        assert abs(row["per_param_us"] - float(m.group(3))) < 0.006, "the table's calibration is not (1 GPU - no DDP) / parameters"
    for m in re.finditer(r"^\| (\w+) \| (\d+)[^|]* \| [-+0-9.]+ \| ([-+0-9.]+) \| [^|]*\|$", table, re.M):
        models[m.group(1)]["cap1_pct"][int(m.group(2))] = float(m.group(3))
    return models


def main():
    ap = plotting.arguments(__doc__)
    ap.add_argument("--result", action="store_true", help="write results/bucket_sweep_dgx1.json")
    a = ap.parse_args()
    table = plotting.ddp_sim(["--table", "pytorch-dgx1"], a.ddp_sim)
    models = table_inputs(table)

    runs = []  # (model, bucketing, GPUs, cap, flags)
    for model, row in models.items():
        for bucketing, gpus in SERIES:
            for cap in CAPS:
                flags = ["--model", model, "--preset", "dgx-v100", "--compute-ms", f"{row['compute_s'] * 1e3:g}",
                         "--per-param-us", f"{row['per_param_us']:.6f}", "--bucketing", bucketing,
                         "--nodes", str(max(1, gpus // 8)), "--gpus-per-node", str(min(8, gpus)), "--bucket-cap-mb", f"{cap:g}"]
                runs.append((model, bucketing, gpus, cap, flags))
    outputs = plotting.ddp_sims([r[4] for r in runs], a.ddp_sim)
    # The input, one text: the table, then each run's flags and output.
    text = table + "".join("$ ddp_sim " + " ".join(r[4]) + "\n" + out for r, out in zip(runs, outputs))
    step_ms = {r[:4]: float(re.search(r"^step: ([0-9.]+) ms", out, re.M).group(1)) for r, out in zip(runs, outputs)}

    fig = plotting.figure(9, 4)
    axes = fig.subplots(1, len(models), sharey=True)
    colours = {8: plotting.COLOURS["predicted"], 16: plotting.COLOURS["buckets"][0]}
    for ax, (model, row) in zip(axes, models.items()):
        for bucketing, gpus in SERIES:
            at25 = step_ms[(model, bucketing, gpus, 25)]
            change = [(step_ms[(model, bucketing, gpus, c)] - at25) / at25 * 100 for c in CAPS]
            style = "o-" if bucketing == "pytorch-1.4" else "^--"
            what = "PyTorch 1.4's buckets" if bucketing == "pytorch-1.4" else "buckets rebuilt (PyTorch >= 1.5, chapter 05)"
            ax.plot(CAPS, change, style, color=colours[gpus], markersize=4 if gpus == 16 else 6,
                    label=f"predicted, {gpus} GPUs, {what}", gid=f"{model} {bucketing} {gpus}")
        for gpus in (8, 16):
            ax.plot([1], [row["cap1_pct"][gpus]], "s", color=colours[gpus], markeredgecolor="black",
                    label=f"published (PyTorch 1.4, p75), {gpus} GPUs", gid=f"{model} published {gpus}")
        ax.axvline(25, color="grey", linestyle=":", linewidth=1)
        ax.annotate("default\n25 MiB", (25, 0), textcoords="offset points", xytext=(4, -24), fontsize=7, color="grey")
        ax.set_xscale("log")
        ax.set_xticks(CAPS, [f"{c:g}" for c in CAPS])
        ax.set_xlabel("bucket_cap_mb (MiB)")
        ax.set_title(f"{NAMES.get(model, model)} ({row['compute_s'] * 1e3:g} ms compute, {row['per_param_us']:.2f} µs a gradient)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("change of the step time against 25 MiB (%)")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=2, frameon=False)
    fig.suptitle("The bucket cap on DGX-1 V100: what ddp_sim predicts, and the one published change (1 MiB)")
    fig.tight_layout(rect=(0, 0.17, 1, 1))
    plotting.save(fig, a.out, {"ddp_sim": text}, "bench/plot_buckets.py")
    if a.dump_drawn:
        plotting.dump_drawn(fig, a.dump_drawn)
    if a.result:
        from results import write_result
        curves = [{"model": model, "bucketing": bucketing, "gpus": gpus, "caps_MiB": CAPS,
                   "change_pct": [round((step_ms[(model, bucketing, gpus, c)] - step_ms[(model, bucketing, gpus, 25)])
                                        / step_ms[(model, bucketing, gpus, 25)] * 100, 3) for c in CAPS]}
                  for model in models for bucketing, gpus in SERIES]
        write_result("bucket_sweep_dgx1", "bench/plot_buckets.py --result --out runs/pictures/buckets_dgx1.png",
                     {"curves": curves, "published_cap1_pct": {m: r["cap1_pct"] for m, r in models.items()}})


if __name__ == "__main__":
    main()
