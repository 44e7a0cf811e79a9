#!/usr/bin/python3
"""Draws the step time against GPUs: ddp_sim's prediction (a line) and PyTorch's published DDP
benchmark on DGX-1 V100 (points), ResNet-50 and ResNet-101, from `ddp_sim --table pytorch-dgx1`
(bench/ddp_table.md is that table).

Usage: bench/plot_scaling.py --out runs/pictures/scaling_dgx1.png [--ddp-sim build-cpu/ddp_sim]
  [--dump-drawn FILE]
The PNG carries the sha256 of the table's text (Note [Pictures that carry their inputs] in
bench/plotting.py).
"""
import re

import plotting

GPUS = [1, 2, 4, 8, 16]
NAMES = {"resnet50": "ResNet-50", "resnet101": "ResNet-101"}


def parse_table(text):
    """The first table (sec/iter): {model: {"no_ddp": s, "predicted": [s per GPUS], "published": [...]}}."""
    models = {}
    for line in text.split("\n\n| model | GPUs | predicted | published | no overlap")[0].splitlines():
        m = re.match(r"\| (\w+) \| ([^|]+) \| ([0-9.]+) \| ([0-9.]+) \|", line)
        if not m:
            continue
        model, gpus, predicted, published = m.group(1), m.group(2).strip(), float(m.group(3)), float(m.group(4))
        row = models.setdefault(model, {"predicted": [], "published": []})
        if gpus == "1, no DDP":
            row["no_ddp"] = published
        else:
            assert int(gpus.split()[0]) == GPUS[len(row["predicted"])], f"unexpected row: {line}"
            row["predicted"].append(predicted)
            row["published"].append(published)
    return models


def main():
    a = plotting.arguments(__doc__).parse_args()
    text = plotting.ddp_sim(["--table", "pytorch-dgx1"], a.ddp_sim)
    models = parse_table(text)

    fig = plotting.figure(9, 3.8)
    axes = fig.subplots(1, len(models))
    for ax, (model, row) in zip(axes, models.items()):
        ms = lambda seconds: [s * 1e3 for s in seconds]  # noqa: E731
        ax.axhline(row["no_ddp"] * 1e3, color="grey", linestyle=":", label="1 GPU without DDP (the compute)")
        ax.plot(GPUS, ms(row["predicted"]), "o-", color=plotting.COLOURS["predicted"], label="predicted (ddp_sim)",
                gid=f"{model} predicted")
        ax.plot(GPUS, ms(row["published"]), "s", color=plotting.COLOURS["published"], label="published (PyTorch)",
                gid=f"{model} published")
        for g, p, q in zip(GPUS, row["predicted"], row["published"]):
            # 1 GPU is where the per-gradient cost was calibrated: no error to show there.
            label = "calibrated" if g == 1 else f"{(p - q) / q * 100:+.1f} %"
            ax.annotate(label, (g, q * 1e3), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=7)
        ax.set_xscale("log", base=2)
        ax.set_xticks(GPUS, ["1", "2", "4", "8", "16\n(2 nodes)"])
        ax.set_xlabel("GPUs (8 per DGX-1 machine)")
        ax.set_ylabel("time per iteration, p50 (ms)")
        ax.set_title(f"{NAMES.get(model, model)}, batch 32 per GPU")
        low, high = row["no_ddp"] * 1e3, max(row["published"]) * 1e3
        ax.set_ylim(low - 0.15 * (high - low), high + 0.25 * (high - low))
        ax.grid(alpha=0.3)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=3, frameon=False)
    fig.suptitle("DDP's step time against GPUs on DGX-1 V100: ddp_sim's prediction against PyTorch's published p50\n"
                 "(labels: the prediction's error)")
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    plotting.save(fig, a.out, {"ddp_sim": text}, "bench/plot_scaling.py")
    if a.dump_drawn:
        plotting.dump_drawn(fig, a.dump_drawn)


if __name__ == "__main__":
    main()
