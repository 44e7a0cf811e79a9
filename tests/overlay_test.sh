#!/usr/bin/env bash
# tests/overlay_build.py with a file that the build compiles together with others (Note
# [Compiled together] in CMakeLists.txt): a change to it must reach the program it builds. A
# student's solution may edit any file, headers too, not only those a solution patch edits.
# Usage: tests/overlay_test.sh <build folder>
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:?usage: tests/overlay_test.sh <build folder>}" && pwd)
scratch=$(mktemp -d "${TMPDIR:-/tmp}/ddp-overlay-test.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
file=05_ddp/trainer/options.cpp
grep -q "\"$root/$file\"" "$build"/CMakeFiles/ddp_trainer.dir/Unity/unity_*.cxx 2>/dev/null ||
  { echo "SKIPPED: this build compiles $file on its own (DDP_COMPILE_TOGETHER=OFF)"; exit 77; }
mkdir -p "$scratch/course"
(cd "$root" && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -p -t "$scratch/course") ||
  { echo "FAILED: could not copy the course"; exit 1; }
sed -i 's/"Stop after this many optimizer steps in all"/"Stop after this many steps CHANGED_IN_THE_COPY" DDP_CHANGED_HEADER/' "$scratch/course/$file"
grep -q "CHANGED_IN_THE_COPY" "$scratch/course/$file" || { echo "FAILED: the help text to change is no longer in $file"; exit 1; }
# A header changes too (Note [The changed headers apart] in overlay_build.py): the copy's, not
# the build's, reaches the program. One that only the files compiled together with $file include
# (its own, options.h, is in most of chapter 05's files: all of them would compile again).
header=05_ddp/beyond/comm_hooks.h
echo '#define DDP_CHANGED_HEADER " AND_IN_ITS_HEADER"' >> "$scratch/course/$header"
sed -i "0,/^#include/s||#include \"$header\"\n#include|" "$scratch/course/$file"
python3 "$root/tests/overlay_build.py" "$build" "$root" "$scratch/course" "$scratch/bin" 05_ddp || { echo "FAILED: overlay_build.py"; exit 1; }
# (The help read whole before grep: with pipefail, grep -q's early exit would fail the pipe.)
help=$("$scratch/bin/05_ddp" --help)
grep -q "CHANGED_IN_THE_COPY AND_IN_ITS_HEADER" <<< "$help" ||
  { echo "FAILED: the program built from the copy does not have the copy's change to $file and to $header"; exit 1; }
help=$("$build/05_ddp" --help)
grep -q CHANGED_IN_THE_COPY <<< "$help" && { echo "FAILED: the build's own program changed"; exit 1; }
echo "overlay: a change to $file, compiled together with its neighbours, and to a header, is in the program built from the copy"
