#!/usr/bin/env bash
# tests/overlay_build.py with a file that the build compiles together with others (Note
# [Compiled together] in CMakeLists.txt): a change to it must reach the program it builds. A
# student's solution may edit any file, headers too, not only those a solution patch edits.
# And the program it builds, its files compiled again without optimising (Note [Overlays
# compiled unoptimised] in overlay_build.py), computes the build's own bits: the DDP class, the
# trainer, SGD and AdamW compiled again end two-rank runs with weight decay (AdamW's is a
# multiply-add, which a target with the instruction fuses) with the build's fingerprints.
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
# The DDP class (a file compiled on its own) changes too, in nothing it computes: it is then
# compiled again with the trainer's files, whose arithmetic the runs below compare.
echo "// changed in the copy: compiled again by overlay_build.py" >> "$scratch/course/05_ddp/ddp.cpp"
python3 "$root/tests/overlay_build.py" "$build" "$root" "$scratch/course" "$scratch/bin" 05_ddp > "$scratch/overlay.log" 2>&1 ||
  { echo "FAILED: overlay_build.py: $(tail -n 5 "$scratch/overlay.log")"; exit 1; }
cat "$scratch/overlay.log"
grep -q "compiling 05_ddp/ddp.cpp" "$scratch/overlay.log" || { echo "FAILED: 05_ddp/ddp.cpp was not compiled again"; exit 1; }
# (The help read whole before grep: with pipefail, grep -q's early exit would fail the pipe.)
help=$("$scratch/bin/05_ddp" --help)
grep -q "CHANGED_IN_THE_COPY AND_IN_ITS_HEADER" <<< "$help" ||
  { echo "FAILED: the program built from the copy does not have the copy's change to $file and to $header"; exit 1; }
help=$("$build/05_ddp" --help)
grep -q CHANGED_IN_THE_COPY <<< "$help" && { echo "FAILED: the build's own program changed"; exit 1; }
# The same bits, unoptimised: SGD and AdamW with weight decay, two ranks, each run by both programs.
fingerprint() {  # <05_ddp> <name> <flags...>: the run's fingerprint line
  local bin=$1 name=$2
  shift 2
  "$bin" --nproc-per-node 2 --max-steps 10 --log-every 100 --out "$scratch/runs/$name" "$@" 2>&1 | grep -o "params fingerprint [0-9a-f]*"
}
for optimizer in sgd adamw; do
  flags=(--optimizer "$optimizer" --weight-decay 0.01)
  [ "$optimizer" = adamw ] && flags+=(--lr 1e-3)
  ours=$(fingerprint "$scratch/bin/05_ddp" "overlay-$optimizer" "${flags[@]}")
  theirs=$(fingerprint "$build/05_ddp" "build-$optimizer" "${flags[@]}")
  [ -n "$ours" ] && [ "$ours" = "$theirs" ] ||
    { echo "FAILED: $optimizer: the program built unoptimised printed '${ours:-no fingerprint}', the build's '${theirs:-no fingerprint}'"; exit 1; }
  echo "overlay: $optimizer with weight decay, two ranks, 10 steps: the same $ours as the build's own program"
done
echo "overlay: a change to $file, compiled together with its neighbours, and to a header, is in the program built from the copy"
