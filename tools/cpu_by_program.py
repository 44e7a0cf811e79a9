#!/usr/bin/env python3
"""Where a command's CPU goes, by program: runs COMMAND, samples every process of the machine
every 0.15 s from /proc, and sums each process's CPU time (user + system) by its program.

  tools/cpu_by_program.py [--raw FILE] -- COMMAND...   run it, then summarise
  tools/cpu_by_program.py --summarise FILE --command "tools/cpu_by_program.py -- COMMAND..."
                                                       summarise a raw file kept by --raw

Writes results/cpu_by_program.json (with DDP_RECORD_RESULTS=1; else $TMPDIR/ddp-results, as
scripts/results.sh does) and prints the table: per program, its CPU seconds, its processes, and
its distinct command lines (a rank forked in place shares its launcher's; each distinct line is
about one start of the program, which for a LibTorch program costs about 0.3 s of CPU before
main(): docs/tests.md, "Where the CPU goes"). Beside them: the wall time, and the CPU the whole
machine was busy for (from /proc/stat) in that time.

By test, too: a process of the command is counted under the test it runs in, the outermost of
its ancestors (or itself) that a ctest started. A GoogleTest is named by its filter, a script
by its command line. The test is looked up when a process is first seen and when it execs. A
process outside the command, one that no ctest started, and one whose parents had ended by
then (an orphan is adopted by init) are counted under "(no test)".

What it cannot see: a process that lives less than one sample (0.15 s) is missed, and a process
is counted up to its last sample (up to 0.15 s of its CPU lost: with thousands of processes, a
good part of the gap between the programs' sum and the machine's busy time); processes that
were running before the command (and this sampler) are left out, kernel threads too. Run nothing else beside it: it counts the
whole machine's processes. The sampler itself takes about 2-3 % of one core.
"""
import collections
import json
import os
import signal
import subprocess
import sys
import time

PERIOD_S = 0.15
USAGE = "usage: tools/cpu_by_program.py [--raw FILE] -- COMMAND...  |  tools/cpu_by_program.py --summarise FILE --command COMMAND"


def busy_ticks():
    with open("/proc/stat") as f:
        v = list(map(int, f.readline().split()[1:]))
    return v[0] + v[1] + v[2] + v[5] + v[6]  # user, nice, system, irq, softirq (guest is in user; steal is not ours)


def read_stat(pid):
    """(comm, ppid, ticks, start time) of a process, from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as f:
        s = f.read()
    rest = s[s.rindex(")") + 2:].split()
    return s[s.index("(") + 1:s.rindex(")")], int(rest[1]), int(rest[11]) + int(rest[12]), rest[19]


def command_line(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read(300).replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def test_name(line):
    """A test's name from its process's command line: the GoogleTest it filters, or the line (a
    filter of many tests, with the program's name)."""
    words = line.split()
    for word in words:
        if word.startswith("--gtest_filter="):
            name = word[len("--gtest_filter="):]
            return name if not any(c in name for c in "*?:") else f"{os.path.basename(words[0])} {word}"
    return line.strip()


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def shown(test):
    """A test's name as the result file keeps it: paths in this repository relative to it."""
    return test.replace(ROOT + "/", "")[:120]


def test_of(pid, ppid, tests):
    """The test a process of the command runs under: its outermost ancestor (or itself) whose
    parent is a ctest, so that a test which runs ctest itself keeps its own processes. Only a
    process whose ancestors lead to this tool is the command's; any other is under no test.
    tests caches, by pid and start time, the answer of each ancestor walked up to the test's own
    process, that one included (a ctest and what is above it may have another)."""
    chain, name, cut, inside = [], None, 0, False
    child, parent = pid, ppid
    for _ in range(64):
        if parent == os.getpid():
            inside = True
            break
        if parent <= 1:
            break
        try:
            comm, grand, _, start = read_stat(parent)
        except (OSError, ValueError, IndexError):
            break
        known = tests.get((parent, start))
        if known is not None:  # only the command's processes are cached: an ancestor's test is the outermost
            name, cut, inside = known, len(chain), True
            break
        if comm == "ctest":
            name, cut = test_name(command_line(child)), len(chain)
        chain.append((parent, start))
        child, parent = parent, grand
    if not inside:
        return NO_TEST
    for k in chain[:cut]:
        tests[k] = name
    return name or NO_TEST


NO_TEST = "(no test)"


def sweep(seen, now, tests):
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            comm, ppid, ticks, start = read_stat(p)
            key = p + ":" + start  # pid and start time: one process, across exec
            e = seen.get(key)
            try:
                exe = os.readlink(f"/proc/{p}/exe")
            except OSError:
                exe = "?"
            if e is None or (exe != "?" and exe != e[1]):  # new, or it has exec'd since: its command line again
                cl = command_line(p)
                if e is None:
                    seen[key] = [comm, exe, ticks, now, now, cl, test_of(int(p), ppid, tests)]
                else:  # a test's own process, seen between ctest's fork and its exec, had ctest's line
                    tests.pop((int(p), start), None)  # what its children will find: its answer now
                    e[1], e[2], e[4], e[5], e[6] = exe, ticks, now, cl, test_of(int(p), ppid, tests)
            else:
                e[2], e[4] = ticks, now
        except (OSError, ValueError, IndexError):
            pass  # ended between listing and reading


def run(command, raw):
    hz = os.sysconf("SC_CLK_TCK")
    seen, tests = {}, {}
    t0 = time.time()
    sweep(seen, t0, tests)
    before = set(seen)  # running before the command: not its
    b0 = busy_ticks()
    child = subprocess.Popen(command)
    signal.signal(signal.SIGINT, lambda *a: child.send_signal(signal.SIGINT))
    signal.signal(signal.SIGTERM, lambda *a: child.send_signal(signal.SIGTERM))
    while child.poll() is None:
        time.sleep(PERIOD_S)
        sweep(seen, time.time(), tests)
    data = {"wall": time.time() - t0, "busy_core_s": (busy_ticks() - b0) / hz, "hz": hz, "exit": child.returncode,
            "procs": [[k] + v for k, v in seen.items() if k not in before]}
    if raw:
        with open(raw, "w") as f:
            json.dump(data, f)
    return data


def summarise(data, first_sweep_only=False):
    hz = data["hz"]
    procs = data["procs"]
    if first_sweep_only:  # a raw file of the first version, which kept every process: those of its first sweep were there before
        t_first = min(p[4] for p in procs)
        procs = [p for p in procs if p[4] > t_first]
    by = collections.defaultdict(lambda: [0.0, 0, set()])
    by_test = collections.Counter()
    for _key, comm, exe, ticks, _first, _last, cl, *test in procs:  # a raw file before tests were kept has none
        by_test[shown(test[0]) if test else NO_TEST] += ticks / hz
        name = os.path.basename(exe) if exe != "?" else comm
        if name.endswith(" (deleted)"):  # its file replaced while it ran (a build): the same program
            name = name[: -len(" (deleted)")]
        by[name][0] += ticks / hz
        by[name][1] += 1
        by[name][2].add(cl)
    rows = sorted(((n, round(c, 1), k, len(d)) for n, (c, k, d) in by.items()), key=lambda r: -r[1])
    tests = sorted(((t, round(c, 1)) for t, c in by_test.items()), key=lambda r: -r[1])
    return rows, tests


def write_result(command, data, rows, tests):
    """results/cpu_by_program.json, through bench/results.py (scripts/results.sh's Python twin)."""
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    from results import write_result as write  # noqa: E402: the course's one writer of result files
    programs = [{"program": n, "cpu_s": c, "processes": k, "command_lines": d} for n, c, k, d in rows if c >= 0.5]
    # The CPU to a tenth: a whole number would make a 1.4 s command's machine 1 s busy.
    fields = {"wall_s": round(data["wall"]), "machine_busy_core_s": round(data["busy_core_s"], 1),
              "sampled_core_s": round(sum(r[1] for r in rows), 1), "programs": programs}
    if any(t != NO_TEST for t, _ in tests):
        total = sum(c for _, c in tests)  # what the samples saw, under a test or not
        fields["tests"] = [{"test": t, "cpu_s": c, "share_pct": round(100 * c / total, 1)} for t, c in tests if c >= 0.5]
    write("cpu_by_program", command, fields)


def main(argv):
    raw = None
    if argv[:1] == ["--summarise"] and len(argv) == 4 and argv[2] == "--command":
        try:
            with open(argv[1]) as f:
                data = json.load(f)
        except (OSError, ValueError) as e:
            print(f"cpu_by_program: {argv[1]}: not a raw file of --raw ({e})", file=sys.stderr)
            return 2
        command = argv[3]
        rows, tests = summarise(data, first_sweep_only="exit" not in data)
    else:
        if argv[:1] == ["--raw"] and len(argv) > 2:
            raw, argv = argv[1], argv[2:]
        if argv[:1] != ["--"] or len(argv) < 2:
            print(USAGE, file=sys.stderr)
            return 2
        command = "tools/cpu_by_program.py -- " + " ".join(argv[1:])
        data = run(argv[1:], raw)
        rows, tests = summarise(data)
    print(f"{command}: {data['wall']:.0f} s, the machine busy for {data['busy_core_s']:.0f} core-s")
    print(f"{'CPU s':>8} {'procs':>6} {'lines':>6}  program")
    for n, c, k, d in rows[:25]:
        print(f"{c:8.1f} {k:6d} {d:6d}  {n}")
    if any(t != NO_TEST for t, _ in tests):
        print(f"{'CPU s':>8}  test (the ctest child a process runs under)")
        for t, c in tests[:25]:
            print(f"{c:8.1f}  {t}")
    write_result(command, data, rows, tests)
    code = data.get("exit", 0) or 0
    return 128 - code if code < 0 else code  # ended by a signal: as a shell says it


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
