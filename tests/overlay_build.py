#!/usr/bin/env python3
"""Builds chapter programs of a changed copy of the course, reusing an existing build of the course.

Usage: overlay_build.py BUILD SOURCE COPY OUT TARGET...

BUILD is a configured and built build folder of the course at SOURCE (with compile_commands.json);
COPY is a copy of SOURCE with some files changed (an exercise's solution applied). Every object
of TARGET's programs and libraries whose source or headers (from the compiler's depfiles) changed
is compiled again from COPY, with BUILD's own flags and precompiled header (the headers COPY
changed found before SOURCE's: Note [The changed headers apart]); its library is copied
with the member replaced; the program is linked with BUILD's link command. Everything else is
BUILD's own. OUT gets the new programs, and a link to each other program of BUILD, so that OUT
can stand in for BUILD (DDP_BUILD=OUT).

Why not a build folder of COPY: that compiles LibTorch's 670 MB precompiled header and every
library again, minutes per exercise and flavour. This compiles one or two files. See
Note [Solutions kept true] in tests/exercise_verify.sh. With Clang they are compiled without
optimising (Note [Overlays compiled unoptimised]).
"""
import fcntl
import filecmp
import json
import os
import shlex
import shutil
import subprocess
import sys


def fail(msg):
    print(f"overlay_build: {msg}", file=sys.stderr)
    sys.exit(2)


def changed_files(source, copy):
    """Files of COPY whose content differs from SOURCE's (absolute SOURCE paths), and new ones."""
    changed = set()
    for root, dirs, files in os.walk(copy):
        dirs[:] = [d for d in dirs if not d.startswith("build") and d not in (".git", ".venv", "runs")]
        for f in files:
            c = os.path.join(root, f)
            s = os.path.join(source, os.path.relpath(c, copy))
            if not os.path.exists(s) or not filecmp.cmp(s, c, shallow=False):
                changed.add(os.path.normpath(s))
    return changed


def depfile_deps(path):
    """The files a depfile (gcc -MD) lists."""
    if not os.path.exists(path):
        return None
    text = open(path).read().replace("\\\n", " ")
    deps = []
    for line in text.splitlines():
        if ":" not in line:
            continue
        deps += line.split(":", 1)[1].split()
    return deps


def unity_in_copy(unity, new_obj, source, copy):
    """A file of files compiled together (Note [Compiled together] in CMakeLists.txt) includes
    SOURCE's files by their absolute paths: its copy beside the new object includes COPY's."""
    text = open(unity).read().replace(f'#include "{source}{os.sep}', f'#include "{copy}{os.sep}')
    path = new_obj[:-2] if new_obj.endswith(".o") else new_obj + ".cxx"
    with open(path, "w") as f:
        f.write(text)
    return path


# Note [Overlays compiled unoptimised]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# The tests compile some 30 objects a run this way (exercises' solutions, the gaming routes'
# fakes, tests/overlay_test.sh), and before this Note the compiler took the largest share of the
# cpu tests' CPU after 05_ddp's (tools/cpu_by_program.py; docs/tests.md, "Where the CPU goes"). Most of a file's time is the optimiser
# and code generation (chapter 03's main.cpp on a 2-core Xeon: 10.9 s of CPU at the build's -O1,
# 5.2-5.9 s at -O0 in two tries). So with Clang the objects compiled again here are compiled at
# -O0, against a copy of the build's precompiled header made at -O0 once per build folder
# (OVERLAY_PCH_DIR below; Clang refuses a header precompiled at another level). GCC's precompiled
# headers work otherwise: with GCC, or a build whose header's command is not in the database,
# nothing changes.
# The programs are expected to compute the same bits, not guaranteed to: the arithmetic is
# LibTorch's, already compiled, and our files' own is IEEE arithmetic in the order written at
# either level. A multiply-add is where a level could decide, fused or not: Clang marks a*b+c
# written in one expression (-ffp-contract=on) at every level, and both levels fuse it where the
# target has the instruction (arm64; the x86-64 baseline the build targets has none, so nothing
# fuses there); but -O1 may also fold one whose operands all became constants after inlining.
# tests/overlay_test.sh holds it where it runs: the program built here ends two-rank SGD and AdamW
# runs with weight decay (AdamW's decay is such a multiply-add) with the build's own
# fingerprints. No check times a program built here (05.10's, which measures, has no solution to
# build).
OVERLAY_PCH_DIR = "overlay-unoptimised"
OPT_LEVELS = ("-O1", "-O2", "-O3", "-Os", "-Og")


def is_clang(args):
    return "clang" in os.path.basename(args[0])


def at_o0(args):
    """The command with each optimisation level given replaced by -O0, so that none overrides it."""
    return [("-O0" if a in OPT_LEVELS else a) for a in args]


def unoptimised(args, build, d, db):
    """A compile command of BUILD at -O0 (see the Note), its precompiled header made so if needed;
    the command as it is with GCC, or when the header's own command cannot be found."""
    if not is_clang(args):
        return args
    out = []
    k = 0
    while k < len(args):
        a = args[k]
        if a == "-include-pch" and out and out[-1] == "-Xclang" and k + 2 < len(args):
            pch = unoptimised_pch(os.path.normpath(os.path.join(d, args[k + 2])), build, db)
            if pch is None:
                return args
            out += [a, args[k + 1], pch]
            k += 3
            continue
        else:
            out.append(a)
        k += 1
    return at_o0(out)


def unoptimised_pch(pch, build, db):
    """BUILD's precompiled header PCH made again at -O0, once per build folder (shared by the
    tests that run at once: made under a lock, into one temporary name that a run killed midway
    leaves for the next to overwrite, then renamed into place); None if no command makes PCH."""
    made = os.path.join(build, OVERLAY_PCH_DIR, os.path.relpath(pch, build))
    fresh = lambda: os.path.exists(made) and os.path.getmtime(made) >= os.path.getmtime(pch)  # noqa: E731
    if fresh():
        return made
    for entry in db:
        args = shlex.split(entry["command"])
        if "-o" in args and os.path.normpath(os.path.join(entry["directory"], args[args.index("-o") + 1])) == pch:
            break
    else:
        print(f"overlay_build: no command in the database makes {pch}: compiling at the build's level", flush=True)
        return None
    os.makedirs(os.path.dirname(made), exist_ok=True)
    with open(os.path.join(build, OVERLAY_PCH_DIR, "lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if fresh():  # made by another test while this one waited
            return made
        tmp = made + ".tmp"
        cmd = at_o0(args)
        cmd[cmd.index("-o") + 1] = tmp
        print(f"overlay_build: precompiling the build's header at -O0, once ({os.path.relpath(pch, build)})", flush=True)
        if subprocess.run(cmd, cwd=entry["directory"]).returncode != 0:
            fail(f"precompiling {pch} at -O0 failed")
        os.replace(tmp, made)
    return made


def main():
    if len(sys.argv) < 6:
        fail(__doc__.strip().splitlines()[2])
    build, source, copy, out = (os.path.abspath(a) for a in sys.argv[1:5])
    targets = sys.argv[5:]
    db_path = os.path.join(build, "compile_commands.json")
    if not os.path.exists(db_path):
        fail(f"{db_path} not found: configure the build with CMAKE_EXPORT_COMPILE_COMMANDS=ON (the course's CMakeLists.txt does)")
    db = json.load(open(db_path))
    changed = changed_files(source, copy)
    print(f"overlay_build: changed in the copy: {', '.join(sorted(os.path.relpath(c, source) for c in changed)) or 'nothing'}")
    os.makedirs(out, exist_ok=True)

    def rel_in_source(path):
        path = os.path.normpath(path)
        if (path == source or path.startswith(source + os.sep)) and not path.startswith(build + os.sep):
            return os.path.relpath(path, source)
        return None

    # The link commands of the targets, and the objects they take: their own and their libraries'.
    links = {}
    for target in targets:
        for sub in ("", "tests"):
            candidate = os.path.join(build, sub, "CMakeFiles", f"{target}.dir", "link.txt")
            if os.path.exists(candidate):
                links[target] = (os.path.join(build, sub), shlex.split(open(candidate).read()))
                break
        else:
            fail(f"no link command for target {target} in {build}")
    wanted_dirs = set()
    for link_dir, args in links.values():
        for a in args:
            full = os.path.normpath(os.path.join(link_dir, a))
            if a.endswith(".o"):
                wanted_dirs.add(full.split(".dir" + os.sep)[0] + ".dir")
            elif a.endswith(".a") and full.startswith(build + os.sep):
                wanted_dirs.add(os.path.join(build, "CMakeFiles", os.path.basename(a)[3:-2] + ".dir"))

    # Note [The changed headers apart]: the files compiled again find a header the copy changed
    # in OVERLAY, which holds only those, and every other header where the build found it, in
    # SOURCE: the very files the precompiled header was made from. Clang keeps a header's
    # `#pragma once` by the file, so the copy's unchanged common/group/compat.h would be a second
    # one beside the precompiled header's (GCC compares contents, and took them for one).
    overlay = os.path.join(out, "changed-headers")
    for c in changed:
        if c.endswith((".h", ".hpp")):
            rel = os.path.relpath(c, source)
            os.makedirs(os.path.dirname(os.path.join(overlay, rel)), exist_ok=True)
            shutil.copy(os.path.join(copy, rel), os.path.join(overlay, rel))

    # Which objects to compile again: those of the targets whose source or any header it read
    # changed (other programs that compile the same file, e.g. the bench's copy of 03's ring, not).
    recompiled = {}  # object path (absolute, in BUILD) -> new object path (in OUT)
    for entry in db:
        d = entry["directory"]
        args = shlex.split(entry["command"])
        obj = args[args.index("-o") + 1]
        obj_abs = os.path.normpath(os.path.join(d, obj))
        if not any(obj_abs.startswith(w + os.sep) for w in wanted_dirs):
            continue
        deps = depfile_deps(obj_abs + ".d")
        if deps is None:
            deps = [entry["file"]]
        deps = {os.path.normpath(os.path.join(d, x)) for x in deps} | {os.path.normpath(entry["file"])}
        if not deps & changed:
            continue
        new_obj = os.path.join(out, "objects", os.path.relpath(obj_abs, build))
        os.makedirs(os.path.dirname(new_obj), exist_ok=True)
        new_args = []
        k = 0
        while k < len(args):
            a = args[k]
            if a == "-o":
                new_args += ["-o", new_obj]
                k += 2
                continue
            if a.startswith("-I") and len(a) > 2 and rel_in_source(a[2:]) is not None:
                # The changed headers first, then SOURCE's own (see headers_in_overlay).
                new_args.append("-I" + os.path.normpath(os.path.join(overlay, rel_in_source(a[2:]))))
            elif os.path.isabs(a) and rel_in_source(a) is not None and a.endswith((".cpp", ".cc", ".cxx")):
                a = os.path.join(copy, rel_in_source(a))
            elif os.path.normpath(a) == os.path.normpath(os.path.join(d, entry["file"])) and os.sep + "Unity" + os.sep in a:
                a = unity_in_copy(a, new_obj, source, copy)
            new_args.append(a)
            k += 1
        print(f"overlay_build: compiling {os.path.relpath(entry['file'], source)}", flush=True)
        r = subprocess.run(unoptimised(new_args, build, d, db), cwd=d)
        if r.returncode != 0:
            print(f"overlay_build: compiling {os.path.relpath(entry['file'], source)} FAILED", file=sys.stderr)
            sys.exit(1)
        recompiled[obj_abs] = new_obj

    for target in targets:
        link_dir, args = links[target]
        new_args = []
        k = 0
        while k < len(args):
            a = args[k]
            if a == "-o":
                new_args += ["-o", os.path.join(out, target)]
                k += 2
                continue
            full = os.path.normpath(os.path.join(link_dir, a))
            if a.endswith(".o") and full in recompiled:
                a = recompiled[full]
            elif a.endswith(".a") and full.startswith(build + os.sep):
                # A library of the course: a copy with the recompiled members replaced.
                lib_dir = os.path.join(build, "CMakeFiles", os.path.basename(a)[3:-2] + ".dir")
                members = [n for o, n in recompiled.items() if o.startswith(lib_dir + os.sep)]
                if members:
                    new_lib = os.path.join(out, "libs", os.path.basename(a))
                    if not os.path.exists(new_lib):
                        os.makedirs(os.path.dirname(new_lib), exist_ok=True)
                        shutil.copy(full, new_lib)
                        subprocess.run(["ar", "r", new_lib] + members, check=True)
                    a = new_lib
            new_args.append(a)
            k += 1
        print(f"overlay_build: linking {target}", flush=True)
        if os.path.lexists(os.path.join(out, target)):
            os.remove(os.path.join(out, target))
        if subprocess.run(new_args, cwd=link_dir).returncode != 0:
            print(f"overlay_build: linking {target} FAILED", file=sys.stderr)
            sys.exit(1)

    # The rest of BUILD's programs, as they are.
    for name in os.listdir(build):
        p = os.path.join(build, name)
        if os.path.isfile(p) and os.access(p, os.X_OK) and not os.path.lexists(os.path.join(out, name)):
            os.symlink(p, os.path.join(out, name))


if __name__ == "__main__":
    main()
