#!/usr/bin/env bash
# exercise: 03.2 One all-reduce for all gradients
# kind: coding
# time: 25 min
# build: 03_manual_allreduce
# trusts: common/group/collective_count.cpp common/group/collective_count.h
# proves: at world size 3 each rank's process group runs exactly one all-reduce per step for the
#         gradients, carrying every gradient's bytes (4 bytes x 161 parameters), and no other
#         collective, send or receive: counted by the backend itself, not by what the program
#         traces (Note [Counted by the backend] in common/group/collective_count.h; a step's
#         other all-reduce is the loss log's); the trace shows that one all-reduce; at 3 ranks
#         the parameters end bit-identical to PyTorch's with one flat all-reduce a step
#         (flat_allreduce_reference.py: the arithmetic, which no printed line fakes); and the
#         chapter's checks still pass: the ranks agree and match one process within its
#         tolerance. At world size 2, where every sum is a + b in any order, the run ends
#         bit-identical to the ring's.
source "$(dirname "$0")/lib.sh"
steps=4
run 120 "$WORK/run.log" 02_spawn --nproc-per-node 3 -- "$B/03_manual_allreduce" --steps $steps --trace "$WORK/t.json" \
  --save-init "$WORK/init.pt" --save-params "$WORK/final.pt" ||
  fail "03_manual_allreduce did not pass its checks at world size 3: $(grep -E 'WRONG|error|FAIL' "$WORK/run.log" | head -n 3)"
# All-reduce spans of rank 0: how many per step, and their bytes.
read -r count bytes < <(python3 - "$WORK/t.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"] if isinstance(d, dict) else d
ar = [e for e in ev if e.get("name") == "all-reduce" and e.get("pid") == 0]
print(len(ar), sum(e.get("args", {}).get("bytes", 0) for e in ar))
PY
)
params=$(( 8 * 16 + 16 + 16 * 1 + 1 ))  # the toy model (common/data/toy_task.h): Linear(8,16), Linear(16,1)
# What the backend ran, at 4 and at 8 steps (Note [Counted by the backend]): the difference is 4
# steps' worth, with joining and the final checks left out. Per step: the gradients' all-reduce
# and one more, the loss log's (losses.add: every rank's 4-byte loss summed for the progress
# line); no sends or receives (those are the ring's, which --allreduce ring alone runs).
for n in 4 8; do
  DDP_COUNT_COLLECTIVES=1 run 120 "$WORK/count-$n.log" 02_spawn --nproc-per-node 3 -- "$B/03_manual_allreduce" --steps $n ||
    fail "03_manual_allreduce failed at world size 3: $(grep -E 'WRONG|error|FAIL' "$WORK/count-$n.log" | head -n 3)"
done
backend_count "$WORK/count-4.log" 0/3
count4=$COUNT
backend_count "$WORK/count-8.log" 0/3
[ -n "$count4" ] && [ -n "$COUNT" ] ||
  fail "rank 0 did not say, when it left, what its process group ran (DDP_COUNT_COLLECTIVES): did the program leave the group as the chapter does?"
read -r all4 ar4 by4 se4 re4 _ <<< "$count4"
read -r all8 ar8 by8 se8 re8 _ <<< "$COUNT"
per_step=$(( (ar8 - ar4) / 4 - 1 ))
p2p=$(( se8 - se4 + re8 - re4 )) others=$(( all8 - all4 - (ar8 - ar4) ))
[ "$per_step" = 1 ] && [ "$p2p" = 0 ] && [ "$others" = 0 ] ||
  fail "rank 0's process group ran $per_step all-reduces a step for the gradients, and in 4 steps $others other collectives and $p2p sends and receives, not 1, 0 and 0: put all gradients into one flat tensor (torch::cat of each g.reshape(-1)), all-reduce it once, divide, and copy each piece back into its gradient (step 4 of 03_manual_allreduce/main.cpp)"
[ $(( (by8 - by4) / 4 - 4 )) = $(( params * 4 )) ] ||
  fail "the one all-reduce per step carried $(( (by8 - by4) / 4 - 4 )) bytes, not $(( params * 4 )) (4 bytes x $params parameters): every gradient must travel in it"
[ "$count" = "$steps" ] || fail "the trace shows $count all-reduces in $steps steps where the process group ran one a step: trace the one all-reduce, as the chapter traces each"
[ "$bytes" = $(( steps * params * 4 )) ] ||
  fail "the trace's all-reduce spans carry $(( bytes / steps )) bytes a step where the process group's one carried $(( params * 4 )): trace it with its own size (numel x element_size)"
# The arithmetic itself: PyTorch, over its own Gloo of the same version, trains from the same
# initial parameters with one flat all-reduce a step (flat_allreduce_reference.py). Gloo cuts the
# one tensor into the same segments on both sides, so the run ends bit-identical to it; at 3
# ranks per-gradient all-reduces, or a ring of sends, sum in other orders and end elsewhere.
cache=$B/CMakeCache.txt
[ -f "$cache" ] || cache=$(dirname "$(readlink -f "$B/02_spawn")")/CMakeCache.txt
py=$(sed -n 's/^DDP_REFERENCE_PYTHON:[A-Z]*=//p' "$cache" 2>/dev/null)
[ -n "$py" ] && [ -x "$py" ] ||
  fail "this build has no Python with PyTorch to compare with (DDP_REFERENCE_PYTHON in $cache): scripts/setup.sh installs it (python3-torch), then scripts/build.sh cpu"
verdict=$(cd "$WORK" && timeout -k 5 120 "$py" "$ROOT/exercises/checks/flat_allreduce_reference.py" --init init.pt \
  --compare final.pt --world-size 3 --steps $steps 2>&1)
[[ $verdict == *"bit-identical: yes"* ]] ||
  fail "at world size 3 the run did not end where one flat all-reduce a step ends (${verdict##*$'\n'}): all-reduce every gradient, flattened in the model's parameter order, in that one all-reduce, then copy each piece back and divide it"
# At 2 ranks the flat all-reduce must change no arithmetic: the ring (one tensor at a time, and
# bit-identical to c10d's at 2 ranks) gives the reference fingerprint.
run 120 "$WORK/flat2.log" 02_spawn --nproc-per-node 2 -- "$B/03_manual_allreduce" --steps $steps ||
  fail "03_manual_allreduce failed at world size 2: $(grep -E 'WRONG|error' "$WORK/flat2.log" | head -n 2)"
run 120 "$WORK/ring2.log" 02_spawn --nproc-per-node 2 -- "$B/03_manual_allreduce" --steps $steps --allreduce ring ||
  fail "03_manual_allreduce --allreduce ring failed at world size 2: $(grep -E 'WRONG|error' "$WORK/ring2.log" | head -n 2)"
fp() { fingerprint "$1" 0/2; }
[ -n "$(fp "$WORK/flat2.log")" ] && [ "$(fp "$WORK/flat2.log")" = "$(fp "$WORK/ring2.log")" ] ||
  fail "at world size 2 the run ended with fingerprint $(fp "$WORK/flat2.log"), the ring's run with $(fp "$WORK/ring2.log"): a flat all-reduce changes no sum at 2 ranks; is every gradient copied back to its own place, and divided once?"
# What 3 ranks gave against one process, for the student to set beside the 2 ranks' fingerprint.
diff3=$(sed -n 's/^\[rank 0\/3\] check: single process on the global batch: max |diff| = \([^ ]*\) .*/\1/p' "$WORK/run.log" | head -n 1)
pass "one all-reduce of $(( params * 4 )) bytes per step, at 3 ranks bit-identical to PyTorch's; $(grep -c ': OK' "$WORK/run.log") checks OK; at 2 ranks fingerprint $(fp "$WORK/flat2.log"), the ring's too; at 3 ranks max |diff| ${diff3:-?} against one process"
