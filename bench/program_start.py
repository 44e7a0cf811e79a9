#!/usr/bin/env python3
"""What a program of the cpu build costs before main() runs, with the build's copy of Debian's
libtorch_cpu (Note [Debian's LibTorch as --as-needed links it] in CMakeLists.txt) and with
Debian's own list of the libraries it needs, the peer, measured in the same run.

Each chapter program that loads LibTorch is started with --help (it prints its flags and exits:
little but the start), REPEATS times each way, the two ways interleaved so that a machine that
drifts drifts for both; the peer is the same file started by the loader with its RPATH ignored
(`ld.so --inhibit-rpath ""`: the loader names the program's own entry ""), so that it finds
Debian's library. CPU seconds (user + system) and
wall seconds per start, medians; the ratio is the copy's over Debian's.

Usage: bench/program_start.py [--repeats N] [build folder, default build-cpu]
Writes results/program_start.json (bench/results.py: DDP_RECORD_RESULTS=1 for the course's own).
"""
import argparse
import glob
import os
import resource
import statistics
import subprocess
import sys
import time

from results import ROOT, write_result


def interpreter(program):
    out = subprocess.run(["readelf", "-l", program], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        if "Requesting program interpreter:" in line:
            return line.split(":", 1)[1].strip(" ]")
    sys.exit(f"program_start.py: {program} names no program interpreter")


def loads_libtorch(program):
    out = subprocess.run(["ldd", program], capture_output=True, text=True, check=True).stdout
    return "libtorch_cpu" in out, len(out.splitlines())


def needed_names(library):
    out = subprocess.run(["readelf", "-d", library], capture_output=True, text=True, check=True).stdout
    return [l.split("[", 1)[1].rstrip("]") for l in out.splitlines() if "(NEEDED)" in l]


def one_start(command):
    """CPU seconds (user + system) and wall seconds of one run of command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    r = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        sys.exit(f"program_start.py: {' '.join(command)}: exit {r.returncode}: {r.stderr.decode()[-300:]}")
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, wall


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("build", nargs="?", default=os.path.join(ROOT, "build-cpu"))
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats: a whole number from 1, not {args.repeats}")
    build = os.path.abspath(args.build)
    if not os.path.isdir(os.path.join(build, "libtorch-as-needed")):
        print(f"program_start.py: {build} has no libtorch-as-needed/: not a build on Debian's LibTorch "
              "(the pip wheel's is loaded as it is), nothing to compare", file=sys.stderr)
        return 2
    programs = sorted(p for p in os.listdir(build) if p[:2].isdigit() and os.access(os.path.join(build, p), os.X_OK)
                      and os.path.isfile(os.path.join(build, p)))
    rows = {}
    for name in programs:
        path = os.path.join(build, name)
        uses, libraries = loads_libtorch(path)
        if not uses:
            continue
        ld = interpreter(path)
        # The loader names the program's own entry "": --inhibit-rpath "" ignores the program's
        # RPATH, so that it finds Debian's library where the system keeps it.
        debians = subprocess.run([ld, "--inhibit-rpath", "", "--list", path], capture_output=True, text=True, check=True).stdout
        ways = {"copy": [path, "--help"], "debian": [ld, "--inhibit-rpath", "", path, "--help"]}
        runs = {w: [] for w in ways}
        one_start(ways["copy"])  # the files in the page cache for both
        one_start(ways["debian"])
        for _ in range(args.repeats):
            for w, command in ways.items():
                runs[w].append(one_start(command))
        row = {"libraries": {"copy": libraries, "debian": len(debians.splitlines())}}
        for w in ways:
            row[w] = {"cpu_s": round(statistics.median(c for c, _ in runs[w]), 3),
                      "wall_s": round(statistics.median(t for _, t in runs[w]), 3)}
        row["cpu_ratio"] = round(row["copy"]["cpu_s"] / row["debian"]["cpu_s"], 2)
        rows[name] = row
        print(f"{name:20s} {row['libraries']['copy']:3d} libraries: {row['copy']['cpu_s']:.3f} s CPU, "
              f"{row['copy']['wall_s']:.3f} s wall;  Debian's list, {row['libraries']['debian']} libraries: "
              f"{row['debian']['cpu_s']:.3f} s CPU, {row['debian']['wall_s']:.3f} s wall;  CPU ratio {row['cpu_ratio']:.2f}")
    if not rows:
        print(f"program_start.py: no program of {build} loads LibTorch", file=sys.stderr)
        return 2
    # What the copy leaves out of Debian's list of names (NEEDED): Debian's library is where the
    # loader finds it for a program with its RPATH ignored.
    copy = glob.glob(os.path.join(build, "libtorch-as-needed", "libtorch_cpu.so.*"))[0]
    debian = next(l.split("=>")[1].split()[0] for l in debians.splitlines() if l.split()[:1] == [os.path.basename(copy)])
    needed = {w: needed_names(f) for w, f in (("copy", copy), ("debian", debian))}
    left_out = [n for n in needed["debian"] if n not in needed["copy"]]
    print(f"{os.path.realpath(debian)} names {len(needed['debian'])} libraries; the copy leaves out {len(left_out)}: {' '.join(left_out)}")
    saved = statistics.median(r["debian"]["cpu_s"] - r["copy"]["cpu_s"] for r in rows.values())
    print(f"each start: {saved:.3f} s of CPU saved (median over {len(rows)} programs, {args.repeats} starts each way)")
    write_result("program_start", f"bench/program_start.py --repeats {args.repeats}",
                 {"repeats": args.repeats, "needed": {"debian": len(needed["debian"]), "copy": len(needed["copy"])},
                  "left_out": left_out, "programs": rows, "cpu_s_saved_per_start": round(saved, 3)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
