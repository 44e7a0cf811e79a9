#!/usr/bin/env bash
# exercise: 04.1 Which gradient is ready first?
# kind: coding
# time: 25 min
# build: 04_grad_hooks 02_spawn
# trusts: common/basics/log.cpp common/observe/trace.cpp common/observe/trace.h common/observe/run_trace.cpp
# proves: the hooks fire once per parameter, in the order the gradients become ready, and the
#         order the hooks logged is the order in which the all-reduces really started (rank 0's
#         --trace), each line logged by its hook before its all-reduce started and after the one
#         before it had (DDP_TRACE_LOG_LINES=1 puts every logged line on the trace, with the
#         moment it was logged: common/basics/log.cpp).
source "$(dirname "$0")/lib.sh"
DDP_TRACE_LOG_LINES=1 run 60 "$WORK/run.log" 02_spawn --nproc-per-node 2 -- "$B/04_grad_hooks" --comm async --trace "$WORK/t.json" ||
  fail "the run failed: $(tail -n 3 "$WORK/run.log")"
grep -q '^\[rank 0/2\] gradient ready: ' "$WORK/run.log" ||
  fail "rank 0 printed no line 'gradient ready: <name> (<bytes> bytes)': in step 3 of 04_grad_hooks/main.cpp, walk model->named_parameters() to have each parameter's name, and log it from its hook with ddp::log0, during the first backward only"
# The hooks' lines against the trace: rank 0's all-reduces of the first step (from the first forward to the
# second), in the order they started.
python3 - "$WORK/run.log" "$WORK/t.json" > "$WORK/verdict" <<'PY'
import json, re, sys
lines = [l for l in open(sys.argv[1]) if l.startswith("[rank 0/2] gradient ready: ")]
logged = []
for l in lines:
    m = re.match(r"\[rank 0/2\] gradient ready: (\S+) \((\d+) bytes\)$", l.strip())
    if not m:
        print("FAIL the line '%s' is not 'gradient ready: <name> (<bytes> bytes)'" % l.strip()); sys.exit()
    logged.append((m.group(1), int(m.group(2))))
d = json.load(open(sys.argv[2]))
ev = [e for e in (d["traceEvents"] if isinstance(d, dict) else d) if e.get("pid") == 0 and e.get("ph") == "X"]
fwd = sorted(e["ts"] for e in ev if e["name"] == "forward")
step0 = sorted((e["ts"], e["args"]["bytes"]) for e in ev if e["name"] == "all-reduce" and fwd[0] <= e["ts"] < fwd[1])
started = [b for _, b in step0]
starts = [t for t, _ in step0]
# When each line was logged (DDP_TRACE_LOG_LINES=1): ddp::log0 put it on the trace too.
when = sorted((e["ts"], e["args"]["line"]) for e in (d["traceEvents"] if isinstance(d, dict) else d)
              if e.get("pid") == 0 and e.get("ph") == "i" and e.get("name") == "log"
              and str(e.get("args", {}).get("line", "")).startswith("gradient ready: "))
if len(logged) != len(started):
    print("FAIL rank 0 logged %d 'gradient ready' lines, but one step starts %d all-reduces, one per parameter: log each hook once, in the first backward only (the hooks run in every step)" % (len(logged), len(started))); sys.exit()
if [b for _, b in logged] != started:
    print("FAIL your lines' sizes are not, in order, those of the all-reduces the trace shows starting: log the gradient's own size (numel x element_size), in the hook, before its all-reduce"); sys.exit()
if [l for _, l in when] != [l.strip()[len("[rank 0/2] "):] for l in lines]:
    print("FAIL the 'gradient ready' lines of the log are not those ddp::log0 logged on rank 0 (the trace has %d of them): log them with ddp::log0" % len(when)); sys.exit()
for i, (t, line) in enumerate(when):
    if not (fwd[0] <= t <= starts[i] and (i == 0 or t > starts[i - 1])):
        print("FAIL '%s' was not logged by its hook between the all-reduce before it starting and its own starting: log from the hook, before it starts its all-reduce" % line); sys.exit()
names = [n for n, _ in logged]
def place(n):  # where named_parameters() of the Sequential puts it: layer, then weight before bias
    m = re.match(r"(\d+)\.(weight|bias)$", n)
    return (int(m.group(1)), m.group(2) == "bias") if m else None
if len(set(names)) != len(names) or None in map(place, names):
    print("FAIL the names %s are not each parameter's once, as model->named_parameters() names them (the key of each item)" % names); sys.exit()
if names != sorted(names, key=place, reverse=True):
    print("FAIL the names %s are not in the order in which backward made the gradients ready: is each hook logging its own parameter's name, as named_parameters() gives it (capture it in the lambda)?" % names); sys.exit()
print("PASS one line per parameter, each logged by its hook after the all-reduce before it started and before its own did, in the order backward made the gradients ready")
PY
verdict=$(cat "$WORK/verdict")
case $verdict in
  PASS*) pass "${verdict#PASS }" ;;
  FAIL*) fail "${verdict#FAIL }" ;;
  *) fail "could not read the run's log and trace: $verdict" ;;
esac
