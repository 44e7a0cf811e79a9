#!/usr/bin/python3
"""The figures of bench/ddp_table.md, measured by ddp_sim and written to results/ddp_table.json
(bench/results.py): every cell of `ddp_sim --table pytorch-dgx1` (the step predicted against
PyTorch's published DGX-1 V100 table, DDP's overhead beside the two naive models, the
bucket_cap_mb=1 change), and the step at interference shares S = 0, the preset's and 0.4 for
ResNet-50 and ResNet-101 at 2, 4 and 8 GPUs, with the table's other inputs (PyTorch 1.4's
buckets, the calibrated cost per gradient). ddp_sim is deterministic: the file changes only when
the simulator, a preset or a profile does.

Usage: bench/ddp_table.py [--ddp-sim build-cpu/ddp_sim]
"""
import argparse
import os
import re
import subprocess

from results import ROOT, write_result

SHARES = [0, 0.189, 0.4]  # 0.189: the dgx-v100 preset's cited interference (bench/ddp_sim_presets.cpp)


def rows(table, header):
    """The rows of the Markdown table that follows the line starting with header, as lists of cells."""
    lines = table.split("\n")
    start = next(i for i, l in enumerate(lines) if l.startswith(header))
    out = []
    for l in lines[start + 1:]:
        if out and not l.startswith("|"):
            break
        if l.startswith("|") and not l.startswith("|---") and not l.startswith("| model"):
            out.append([c.strip() for c in l.strip().strip("|").split("|")])
    return out


def gpus_of(cell):
    return int(re.match(r"\d+", cell).group(0))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ddp-sim", default=os.path.join(ROOT, "build-cpu", "ddp_sim"))
    a = ap.parse_args()
    run = lambda args: subprocess.run([a.ddp_sim, "--profiles-dir", os.path.join(ROOT, "bench", "profiles")] + args,  # noqa: E731
                                      check=True, capture_output=True, text=True).stdout
    table = run(["--table", "pytorch-dgx1"])
    cells = [{"model": r[0], "gpus": gpus_of(r[1]), "predicted_s": float(r[2]), "published_s": float(r[3]),
              "error_pct": float(r[4].split()[0])}
             for r in rows(table, "Sec/iter (p50)") if "no DDP" not in r[1] and "calibration" not in r[4]]
    calibration = {r[0]: {"compute_ms": None, "per_param_us": float(re.search(r"\(([0-9.]+) us", r[4]).group(1))}
                   for r in rows(table, "Sec/iter (p50)") if "calibration" in r[4]}
    for r in rows(table, "Sec/iter (p50)"):
        if "no DDP" in r[1]:
            calibration[r[0]]["compute_ms"] = round(float(r[3]) * 1e3, 3)
    overhead = [{"model": r[0], "gpus": gpus_of(r[1]), "predicted_ms": float(r[2]), "published_ms": float(r[3]),
                 "no_overlap_ms": float(r[4]), "closer_than_both": r[6] == "closer than both"}
                for r in rows(table, "DDP's overhead") if r[6] != "calibration"]
    bucket1 = [{"model": r[0], "gpus": gpus_of(r[1]), "predicted_pct": float(r[2]), "published_pct": float(r[3]),
                "published_p75_s": [float(v) for v in r[4].split(" against ")], "verdict": r[5]}
               for r in rows(table, "bucket_cap_mb=1 against 25")]
    summary = re.search(r"^within 2 %: (\d+) of (\d+) cells; overhead closer than both naive models: (\d+) of (\d+); "
                        r"bucket-1 sign right where the published change is beyond 0.5 %: (\d+) of (\d+)$", table, re.M)
    shares = []
    for model, c in calibration.items():
        for gpus in (2, 4, 8):
            step = {}
            for s in SHARES:
                out = run(["--model", model, "--preset", "dgx-v100", "--compute-ms", f"{c['compute_ms']:g}", "--gpus-per-node", str(gpus),
                           "--bucketing", "pytorch-1.4", "--per-param-us", f"{c['per_param_us']:g}", "--interference", f"{s:g}"])
                step[s] = float(re.search(r"^step: ([0-9.]+) ms", out, re.M).group(1))
            published = next(c["published_s"] for c in cells if c["model"] == model and c["gpus"] == gpus)
            shares.append({"model": model, "gpus": gpus, "published_ms": round(published * 1e3, 3), "step_ms_at_S0": step[0], "step_ms_at_S0.189": step[0.189],
                           "step_ms_at_S0.4": step[0.4], "interference_adds_ms": round(step[0.189] - step[0], 3)})
    write_result("ddp_table", "bench/ddp_table.py", {
        "calibration": calibration, "cells": cells, "overhead": overhead, "bucket_cap_1": bucket1,
        "within_2_pct": [int(summary.group(1)), int(summary.group(2))],
        "overhead_closer_than_both": [int(summary.group(3)), int(summary.group(4))],
        "bucket_1_sign_right": [int(summary.group(5)), int(summary.group(6))],
        "interference_shares": SHARES, "steps_by_share": shares})


if __name__ == "__main__":
    main()
