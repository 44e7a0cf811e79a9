"""Writes one result file, results/NAME.json (Note [Every figure has its source] in
tests/test_pages.cpp): the figures a script measured, with the command that measured them, the
machine's CPU and the date inside. The Python twin of scripts/results.sh's write_result.

    from results import write_result
    write_result("step_cnn_2ranks", "bench/plot_step.py", {"hidden_pct": 85.4})
"""
import datetime
import json
import os
import platform
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def result_cpu():
    name = ""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, env=dict(os.environ, LC_ALL="C")).stdout
        name = next((l.split(":", 1)[1].strip() for l in out.splitlines() if l.startswith("Model name:")), "")
    except OSError:
        pass
    return f"{name or 'unknown CPU'}, {os.cpu_count()} cores, {platform.machine()}"


def write_result(name, command, figures):
    # The course's own results/ only when asked (DDP_RECORD_RESULTS=1), as scripts/results.sh.
    record = os.environ.get("DDP_RECORD_RESULTS") == "1"
    default = os.path.join(ROOT, "results") if record else os.path.join(os.environ.get("TMPDIR", "/tmp"), "ddp-results")
    folder = os.environ.get("DDP_RESULTS_DIR") or default
    os.makedirs(folder, exist_ok=True)
    doc = {"command": command, "cpu": result_cpu(), "date": datetime.date.today().isoformat()}
    doc.update(figures)
    path = os.path.join(folder, name + ".json")
    with open(path + ".tmp", "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(path + ".tmp", path)
    print("wrote", path, "" if record else f"(DDP_RECORD_RESULTS=1 writes the course's results/{name}.json)")
    return path
