#!/usr/bin/env bash
# The ways a student passed checks without the work, each tried, each failing (Note [Solutions
# kept true] in exercise_verify.sh proves each check both ways; this proves what lies between).
#   tests/exercise_gaming.sh <build folder> [measured [ANSWER [KEPT]] | unmeasured]
#   measured: route 5 alone, which measures this machine, or reads the measurements KEPT (run
#   when nothing else does: Note [Measured alone] in scripts/test.sh); ANSWER: the line 05.10's
#   solution measured, which Exercise.05.10 hands it (tests/exercise_verify.sh) instead of
#   measuring again; KEPT: the
#   folder (tests/replay_build.sh) that kept the measurements of the check it ran with ANSWER,
#   which the route's check then reads instead of measuring again; unmeasured: the others;
#   neither: all.
# 1. Two-part answers found half by half: one half right, the other wrong, both ways round, must
#    FAIL with the same words (but the answer quoted): a FAIL that says which half is right gives
#    the answer away (01.1, 02.1, 03.1, 05.6 through check_two_parts; 04.2, 05.3, 05.5, 06.3 and 07.2
#    their own; 06.2's two jobs). 05.4 goes through check_two_parts too, untried here: its check
#    trains 16 times.
# 2. An answer read off a test's name: no Slurm test is named for the state or the signal that
#    06.2 and 06.3 ask for (`ctest -N` lists the names a student can read).
# 3. 05.9 by trying the seven caps: each cap with a made-up step FAILs, and no FAIL line names
#    a step time (which would let the caps be compared without ddp_sim).
# 4. 03.2 and 04.1 by fakes in the code (the routes a student took): each must FAIL, since the
#    backend counts what ran, sends and receives too (Note [Counted by the backend]), and the
#    trace holds when each line was logged (DDP_TRACE_LOG_LINES, common/basics/log.cpp).
# 5. 05.10 without measuring: figures that ddp_sim turns into the ratio written (so the ratio's
#    own check passes) but a one-rank step four times this machine's must FAIL, naming t1 and no
#    figure the check measured.
# 6. Fakes of the checks' tools (timeout, python3, ...) first on PATH: never run.
# 7. 01.2 without a broadcast (rank 0's pid sent by an all-reduce, or through the store), or
#    with one of a placeholder beside them; 05.2 with the first bucket's limit written in as
#    0.1 MiB, or with the new buckets described while the old ones run (reviews found each):
#    each must FAIL, by the backend's own count and what it sent, and by a cap the check draws;
#    01.2 with the backend's lines printed by the program, and 02.2 restarting only exit 3 or
#    with a 'not restarting' that gives no reason, or a list of codes that leaves exit 1 out; 06.1
#    with its line printed whenever a run resumes, the restart written in (students found those);
#    07.1 with nothing kept whole, the class's byte count and the peak doctored (a student's);
#    08.1 with the lighthouse unchanged and the launcher holding the replacement back (a reviewer's),
#    or keeping out whoever was not in the first quorum, not the last (a student's).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$1" && pwd)
export DDP_EXERCISE_NO_BUILD=1
unset DDP_REPLAY_COUNTS  # set only where a route reads kept measurements in their order (route 5)
scratch=$(mktemp -d "${TMPDIR:-/tmp}/exercise-gaming.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
bad=0 part=${2:-all}
measured_answer=${3:-} kept=${4:-}
case $part in all | measured | unmeasured) ;; *) echo "usage: $0 <build folder> [measured [ANSWER [KEPT]] | unmeasured]" >&2; exit 2 ;; esac
[ -z "$kept" ] || [ -d "$kept/runs" ] || { echo "$0: $kept is not a folder of tests/replay_build.sh" >&2; exit 2; }
kept_runs() { ls "$1/runs" | grep -c '\.rc$'; }  # <folder of tests/replay_build.sh>: the runs it kept
check() {  # <id> <answer>: the check's last line
  echo "$1: $2" > "$scratch/answers.txt"
  DDP_BUILD=$build DDP_ANSWERS=$scratch/answers.txt "$root/scripts/exercise.sh" "$1" 2>&1 | tail -n 1
}
truth() { sed -n "s/^$1: *//p" "$root/exercises/solutions/answers.txt"; }
halves() {  # <id> <right first part> <wrong first part> <right second part> <wrong second part>
  local id=$1 a b
  a=$(check "$id" "$2 $5") b=$(check "$id" "$3 $4")
  [[ $a == "FAIL $id: '"*"' is not right"* && $b == "FAIL $id: '"*"' is not right"* ]] ||
    { echo "GAMED $id: a half-wrong answer did not FAIL as wrong: '$a' / '$b'"; bad=1; return; }
  [ "${a//"'$2 $5'"/ANSWER}" = "${b//"'$3 $4'"/ANSWER}" ] ||
    { echo "GAMED $id: the FAIL differs with the half that is right:"; echo "  $a"; echo "  $b"; bad=1; return; }
  echo "ok $id: both half-right answers FAIL alike: $a"
}
if [ "$part" != unmeasured ]; then
  # 5. 05.10: this machine's answer, measured by the solution, then t1 four times and the ratio made
  # ddp_sim's again from the doctored figures.
  [ -n "$measured_answer" ] || measured_answer=$("$root/exercises/solutions/05.10.sh" "$build")
  read -r t1 s a alpha T ratio verdict <<< "$measured_answer"
  [[ ${verdict:-} == yes || ${verdict:-} == no ]] ||
    { echo "05.10's solution measured no answer line (a busy machine measures nonsense: run this alone)"; exit 1; }
  t1x4=$(awk -v t="$t1" 'BEGIN { printf "%.3f", 4 * t }')
  read -r _ r < <("$root/exercises/checks/two_ranks_prediction.sh" "$build" "$t1x4" "$s" "$a" "$alpha" "$T")
  answer5="$t1x4 $s $a $alpha $T $r $(awk -v r="$r" 'BEGIN { print (r > 1) ? "yes" : "no" }')"
  if [ -n "$kept" ]; then
    # The measurements the check made with the right answer, read again in their order.
    measured_runs=$(kept_runs "$kept")
    out=$(export DDP_REPLAY_COUNTS=$scratch/counts05.10; build=$kept; check 05.10 "$answer5")
    [ "$(kept_runs "$kept")" = "$measured_runs" ] ||
      { echo "GAMING 05.10: the check measured something the right answer's check did not: $(ls -t "$kept/runs" | head -n 2 | tr '\n' ' ')"; bad=1; }
  else
    out=$(check 05.10 "$answer5")
  fi
  if [[ $out == "FAIL 05.10: your t1 ($t1x4)"* ]]; then
    echo "ok 05.10: t1 four times with its consistent ratio FAILs: $out"
  else
    echo "GAMED 05.10: t1 four times ($t1x4 ms for $t1) and its ratio $r: '$out'"; bad=1
  fi
fi
if [ "$part" = measured ]; then
  [ $bad = 0 ] && echo "PASS: the measured gaming route FAILs"
  exit $bad
fi

for id in 01.1 03.1; do
  read -r x y <<< "$(truth "$id")"
  halves "$id" "$x" "$((x + 1))" "$y" "$((y + 1))"
done
read -r x y z <<< "$(truth 05.6)"
halves 05.6 "$x $y" "$x $((y + 1))" "$z" "$((z + 1))"
read -r w x y z <<< "$(truth 04.2)"
halves 04.2 "$w $x" "$w $((x + 64))" "$y $z" "$y $((z + 4))"
read -r x y <<< "$(truth 05.5)"
halves 05.5 "$x" "$((x + 1))" "$y" "$((y - 1))"
read -r x y <<< "$(truth 05.3)"
halves 05.3 "$x" "$((x + 1))" "$y" "$((y + 3297832))"
read -r x y <<< "$(truth 07.2)"
halves 07.2 "$x" "$((x - 1))" "$y" "$((y - 1))"
# 06.2's and 06.3's checks run simulated Slurm jobs that wait out their time limits (about 18 s
# and 5 s a check). Asked twice here, the second check replays what the first one's jobs printed
# (tests/replay_build.sh: a build folder whose 06_slurm keeps a run's output and exit code, keyed
# by its arguments, and replays them): both half-wrong answers are judged against one
# observation, and the observation itself is Exercise.06.2's and Exercise.06.3's to prove (the
# solution's answer PASSes there).
memo=$scratch/memo
"$root/tests/replay_build.sh" "$build" "$memo" 06_slurm || { echo "GAMING: tests/replay_build.sh failed"; exit 1; }
slurm_build=$build build=$memo
read -r a_starts a_state b_starts b_state <<< "$(truth 06.2)"
halves 06.2 "$a_starts $a_state" "$((a_starts + 1)) $a_state" "$b_starts $b_state" "$b_starts FAILED"
read -r state signal <<< "$(truth 06.3)"
halves 06.3 "$state" COMPLETED "$signal" TERM
build=$slurm_build
replayed=$(kept_runs "$memo")
[ "$replayed" = 3 ] || { echo "GAMING 06.2/06.3: the checks ran $replayed distinct Slurm jobs, not 3 (two of 06.2's, one of 06.3's): each second check must replay the first's"; bad=1; }

# 2. Answers in test names.
names=$(cd "$build" && ctest -N | grep -i slurm)
for id in 06.2 06.3; do
  for word in $(truth "$id"); do
    [[ $word =~ ^[0-9]+$ ]] && continue  # a count: in many names, and no answer by itself
    hit=$(grep -i -- "$word" <<< "$names" | head -n 1)
    if [ -n "$hit" ]; then echo "GAMED $id: '$word' is in a test's name:$hit"; bad=1; else echo "ok $id: '$word' in no Slurm test's name"; fi
  done
done

# 3. 05.9, every cap tried.
leaks=0
for cap in 1 5 10 25 50 100 200; do
  out=$(check 05.9 "$cap 1.0")
  [[ $out == "FAIL 05.9:"* ]] || { echo "GAMED 05.9: '$cap 1.0' did not FAIL: $out"; bad=1; }
  grep -qE '[0-9]+\.[0-9]+ ?ms' <<< "${out//"'$cap 1.0'"/}" && { echo "GAMED 05.9: its FAIL names a step time: $out"; bad=1; leaks=1; }
done
[ $leaks = 0 ] && echo "ok 05.9: seven caps with a made-up step FAIL, naming no step time"

# 4. 03.2 and 04.1 by fakes in the code, built as a solution is (exercise_verify.sh): one build
# of each chapter, the fake chosen when it runs (DDP_FAKE).
mkdir -p "$scratch/course"
(cd "$root" && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -p -t "$scratch/course")
solved() {  # <id>: its solution applied to the faked course (routes 4 and 7 fake from there)
  (cd "$scratch/course" && patch -s -p1 < "$root/exercises/solutions/$1.patch") || { echo "GAMING $1: its solution no longer applies"; bad=1; }
}
fake_build() {  # <target>: builds the faked course's <target> into $scratch/bin
  python3 "$root/tests/overlay_build.py" "$build" "$root" "$scratch/course" "$scratch/bin" "$@" > "$scratch/overlay.log" 2>&1 ||
    { echo "GAMING: the faked course did not build: $(tail -n 5 "$scratch/overlay.log")"; bad=1; return 1; }
}
faked() {  # <fake> <id> <expected start of the FAIL line> <what the fake does>
  local out
  out=$(DDP_FAKE=$1 DDP_BUILD=$scratch/bin DDP_ANSWERS=$root/exercises/answers.txt "$root/scripts/exercise.sh" "$2" 2>&1 | tail -n 1)
  if [[ $out == "FAIL $2: $3"* ]]; then echo "ok $2: $4 FAILs: ${out:0:110}..."; else echo "GAMED $2: $4: '$out'"; bad=1; fi
}
# 03.2, three fakes: (span) per-gradient all-reduces untraced, and a barrier traced as the
# "all-reduce" of the 644 bytes the check wants; (ring) each gradient summed by the ring's sends
# and receives, and a traced all-reduce of 644 bytes of zeros; (printed) the variable that asks
# for the count unset, and the count's line printed with the figures the check wants; (exit) that
# line printed and the process ended before the group prints its own: the arithmetic gives it away.
main=$scratch/course/03_manual_allreduce/main.cpp
traced='          ddp::traced(group.pg->allreduce(buffer), "all-reduce", g.numel() * g.element_size())->wait();'
grep -qF "$traced" "$main" || { echo "GAMING 03.2: the line to fake is gone from 03's main.cpp: update this test"; bad=1; }
python3 - "$main" "$traced" <<'PY'
import sys
path, traced = sys.argv[1], sys.argv[2]
s = open(path).read()
s = s.replace("int main(int argc, char** argv) {", """int main(int argc, char** argv) {
  const std::string fake = std::getenv("DDP_FAKE") ? std::getenv("DDP_FAKE") : "";
  if (fake == "printed") unsetenv("DDP_COUNT_COLLECTIVES");""", 1)
s = s.replace(traced, """          if (fake == "ring") {
            ch03::ring_allreduce(*group.pg, g);
          } else {
            group.pg->allreduce(buffer)->wait();  // untraced
          }""")
s = s.replace("      // 5. The update, by hand", """      if (fake == "span") ddp::traced(group.pg->barrier(), "all-reduce", 644)->wait();
      if (fake == "ring" || fake == "printed" || fake == "exit") {
        std::vector<torch::Tensor> zeros{torch::zeros({161})};
        ddp::traced(group.pg->allreduce(zeros), "all-reduce", 644)->wait();
      }

      // 5. The update, by hand""", 1)
s = s.replace("    ddp::finish_trace(train.trace, group);", """    ddp::finish_trace(train.trace, group);
    if (fake == "printed" || fake == "exit")
      ddp::log("the process group ran " + std::to_string(2 * cfg.steps + 5) + " collectives: " + std::to_string(2 * cfg.steps + 3) +
               " all-reduces of " + std::to_string(648 * cfg.steps + 16) + " bytes in all, 0 sends, 0 receives, 0 broadcasts (DDP_COUNT_COLLECTIVES)");
    if (fake == "exit") std::fflush(stdout), std::_Exit(0);  // before the group's own count""", 1)
open(path, "w").write(s)
PY
if fake_build 03_manual_allreduce; then
  faked span 03.2 "rank 0's process group ran " "a barrier traced as the all-reduce, the gradients' untraced"
  faked ring 03.2 "rank 0's process group ran " "the ring's sends for the gradients and an all-reduce of zeros"
  faked printed 03.2 "rank 0 said 2 times" "the count unset and its line printed"
  faked exit 03.2 "at world size 3 the run did not end where one flat all-reduce" "the count's line printed, then an exit before the group's own"
fi
# 04.1, two fakes: (lines) the four lines printed before training, the hooks untouched; (after)
# the solution's line logged by the hook after it has started its all-reduce.
solved 04.1
main=$scratch/course/04_grad_hooks/main.cpp
python3 - "$main" <<'PY'
import sys
path = sys.argv[1]
s = open(path).read()
line = 'if (hooks_fired++ < params.size()) ddp::log0("gradient ready: " + name + " (" + std::to_string(bytes) + " bytes)");'
assert line in s, "the solution's line is gone: update this test"
s = s.replace("int main(int argc, char** argv) {", """int main(int argc, char** argv) {
  const std::string fake = std::getenv("DDP_FAKE") ? std::getenv("DDP_FAKE") : "";""", 1)
s = s.replace(line, "if (fake.empty()) " + line)
s = s.replace("""            if (comm == "sync") {""", """            struct After {  // logs as the hook returns: its all-reduce has started
              std::function<void()> f;
              ~After() { f(); }
            } after{[&, name, bytes] { if (fake == "after" && hooks_fired++ < params.size()) ddp::log0("gradient ready: " + name + " (" + std::to_string(bytes) + " bytes)"); }};
            if (comm == "sync") {""", 1)
s = s.replace("    ddp::toy::LossLog losses(group, cfg.steps);", """    ddp::toy::LossLog losses(group, cfg.steps);
    if (fake == "lines")
      for (const char* l : {"2.bias (4 bytes)", "2.weight (64 bytes)", "0.bias (64 bytes)", "0.weight (512 bytes)"})
        ddp::log0(std::string("gradient ready: ") + l);""", 1)
open(path, "w").write(s)
PY
if fake_build 04_grad_hooks 02_spawn; then
  faked lines 04.1 "'gradient ready: 2.bias (4 bytes)' was not logged by its hook" "four lines printed before training"
  faked after 04.1 "'gradient ready: 2.bias (4 bytes)' was not logged by its hook" "each line logged after its all-reduce started"
fi

# 7. 01.2 by an all-reduce and by the store, each with a placeholder broadcast beside it or
# without; 05.2 by a written-in 0.1 MiB and by a described layout. Each fake is the solution with
# one thing changed, so that nothing else fails first.
solved 01.2
python3 - "$scratch/course/01_join_group/main.cpp" "    group.pg->broadcast(b)->wait();" "    group.pg->allreduce(t)->wait();" <<'PY'
import sys
text = open(sys.argv[1]).read()
assert sys.argv[2] in text and sys.argv[3] in text, "the solution's broadcast or the chapter's all-reduce is gone: update this test"
# (allreduce+broadcast) rank 0's pid as a second element of the chapter's own all-reduce.
text = text.replace(sys.argv[3], """    const std::string fake = std::getenv("DDP_FAKE") ? std::getenv("DDP_FAKE") : "";
    double carried = 0;
    if (fake == "allreduce+broadcast") {
      std::vector<torch::Tensor> two{torch::cat({t[0], torch::full({1}, rank == 0 ? static_cast<double>(::getpid()) : 0.0, torch::kFloat64)})};
      group.pg->allreduce(two)->wait();
      t[0].fill_(two[0][0].item<double>());
      carried = two[0][1].item<double>();
    } else {
      group.pg->allreduce(t)->wait();
    }""")
text = text.replace(sys.argv[2], """    if (fake == "allreduce") {  // the others add 0: the sum is rank 0's pid
      if (rank != 0) b[0].zero_();
      group.pg->allreduce(b)->wait();
    } else if (fake == "allreduce+broadcast") {
      b[0].fill_(carried);
    } else if (fake.rfind("store", 0) == 0 || fake == "printed") {  // rank 0 writes it, the others wait for it
      const std::string pid = std::to_string(::getpid());
      if (rank == 0) group.store->set("pid", std::vector<uint8_t>(pid.begin(), pid.end()));
      else b[0].fill_(std::stod([&] { auto v = group.store->get("pid"); return std::string(v.begin(), v.end()); }()));
    }
    if (fake == "printed") {  // rank 0's pid through the store (above), and the backend's two lines forged
      ddp::log("the process group ran 2 collectives: 1 all-reduces of 8 bytes in all, 0 sends, 0 receives, 1 broadcasts (DDP_COUNT_COLLECTIVES)");
      if (rank == 0) ddp::log("as the root of its broadcasts this rank sent: " + std::to_string(::getpid()) + " (DDP_COUNT_COLLECTIVES)");
    }
    if (fake.size() > 10 && fake.compare(fake.size() - 10, 10, "+broadcast") == 0) {  // and a broadcast of a placeholder
      std::vector<torch::Tensor> placeholder{torch::zeros({1}, torch::kFloat64)};
      group.pg->broadcast(placeholder)->wait();
    }""")
open(sys.argv[1], "w").write(text)
PY
if fake_build 01_join_group; then
  faked allreduce 01.2 "rank 0's process group ran 0 broadcasts" "rank 0's pid sent by an all-reduce"
  faked store 01.2 "rank 0's process group ran 0 broadcasts" "rank 0's pid sent through the store"
  faked allreduce+broadcast 01.2 "rank 0's process group ran 1 all-reduces of 16 bytes" "rank 0's pid in the chapter's own all-reduce, and a placeholder broadcast"
  faked printed 01.2 "rank 0 said 2 times" "rank 0's pid through the store, and the backend's lines printed by the program"
  faked store+broadcast 01.2 "rank 0's broadcast sent '0'" "rank 0's pid sent through the store, and a placeholder broadcast"
fi
# 02.2, two fakes: (only3) every failure but exit 3 left unrestarted, with the solution's line;
# (bare) the solution's rule with a 'not restarting' that gives no reason (a student's route).
solved 02.2
python3 - "$scratch/course/02_spawn/restarts.cpp" <<'PY'
import sys
path = sys.argv[1]
s = open(path).read()
rule = "    if (o.code == ddp::kExitUsage) {"
line = 'ddp::log("not restarting: exit 2 is a usage error, and a restart would fail the same way");'
assert rule in s and line in s, "the solution's rule or its line is gone: update this test"
s = s.replace(rule, """    const std::string fake = std::getenv("DDP_FAKE") ? std::getenv("DDP_FAKE") : "";
    if (fake == "only3" ? o.code != 3 && o.code != ddp::kExitOk
        : fake == "list" ? o.code != 3 && o.code != ddp::kExitOk && o.code < 128
        : o.code == ddp::kExitUsage) {""")
s = s.replace(line, 'ddp::log(fake == "bare" ? "not restarting" : "not restarting: exit 2 is a usage error, and a restart would fail the same way");')
open(path, "w").write(s)
PY
if fake_build 02_spawn; then
  faked only3 02.2 "a worker that is killed must still be restarted" "only exit 3 restarted"
  faked bare 02.2 "the 'not restarting' line gives no reason" "a 'not restarting' with no reason"
  faked list 02.2 "workers that exit 1" "only exit 3 and signals restarted"
fi
# 05.2, two fakes: (written) the first bucket's limit written in as 0.1 MiB; (described) the log
# describes the new buckets, and the buckets that run are rebuilt the old way after it.
solved 05.2
python3 - "$scratch/course/05_ddp/ddp.cpp" "$scratch/course/05_ddp/ddp_interface.cpp" <<'PY'
import sys
limit = "std::min(kFirstBucketBytes, cap_bytes_)"
written = ('(std::getenv("DDP_FAKE") && std::string(std::getenv("DDP_FAKE")) == "written" && cap_bytes_ < kFirstBucketBytes'
           ' ? size_t{104857} : ' + limit + ')')
logged = '    log0("buckets rebuilt in the order gradients became ready: " + describe_buckets());\n'
for path in sys.argv[1:]:
    text = open(path).read()
    assert limit in text, "the solution's limit is gone from " + path + ": update this test"
    text = text.replace(limit, written)
    if path.endswith("ddp.cpp"):
        assert logged in text, "the rebuilt buckets' log line is gone: update this test"
        text = text.replace(logged, logged + """    if (std::getenv("DDP_FAKE") && std::string(std::getenv("DDP_FAKE")) == "described")
      build_buckets(assign_buckets(ready_order_, bytes_, cap_bytes_ == kOneBucket ? kOneBucket : kFirstBucketBytes, cap_bytes_));
""")
    open(path, "w").write(text)
PY
# 06.1 in the same build: (restart1) its line whenever a run resumes, the restart written in as 1.
solved 06.1
python3 - "$scratch/course/05_ddp/main.cpp" <<'PY'
import sys
path = sys.argv[1]
s = open(path).read()
cond = "    if (restart && job && std::atoi(restart) > 0) {"
assert cond in s, "06.1's solution is gone: update this test"
s = s.replace(cond, """    const bool fake_restart1 = std::getenv("DDP_FAKE") && std::string(std::getenv("DDP_FAKE")) == "restart1";
    if (fake_restart1 && step > 0) ddp::log0("requeued: restart 1 of Slurm job " + std::string(job ? job : "?") + ", resuming at step " + std::to_string(step));
    if (!fake_restart1 && restart && job && std::atoi(restart) > 0) {""")
open(path, "w").write(s)
PY
if fake_build 05_ddp 02_spawn 06_slurm; then
  faked restart1 06.1 "a run resumed outside Slurm" "the line whenever a run resumes, restart 1 written in"
  faked written 05.2 "at --bucket-cap-mb 0.00" "the first bucket's limit written in as 0.1 MiB"
  faked described 05.2 "at --bucket-cap-mb 0.00" "the new buckets described, the old ones run"
fi

# 07.1, one fake (a student's route): nothing kept whole, the backward's gathers left out of the
# class's own byte count, and an unused tensor to raise the peak.
solved 07.1
python3 - "$scratch/course/07_fsdp/fsdp.cpp" "$scratch/course/07_fsdp/main.cpp" <<'PY'
import sys
fsdp, main = sys.argv[1], sys.argv[2]
s = open(fsdp).read()
kept = "if (reshard_after_forward_ || !for_backward) reshard(u);"
assert kept in s, "07.1's solution is gone from fsdp.cpp: update this test"
open(fsdp, "w").write(s.replace(kept, "if (reshard_after_forward_ || !for_backward || std::getenv(\"DDP_FAKE\")) reshard(u);"))
s = open(main).read()
counted = "      sent_last_step = fsdp.bytes_sent() - sent_before;"
assert counted in s, "07's count of the last step's bytes is gone from main.cpp: update this test"
open(main, "w").write(s.replace(counted, counted + """
      static torch::Tensor ballast;  // the fake: the class's count without the backward's gathers, and a higher peak
      if (std::getenv("DDP_FAKE") && !f.reshard_after_forward) {
        sent_last_step = sent_last_step * (last - first + 1) / (2 * (last - first) + 1);
        if (!ballast.defined()) ballast = torch::ones({1 << 18});
      }"""))
PY
if fake_build 07_fsdp; then
  faked counter 07.1 "the class says its rings sent" "nothing kept whole, the class's count and the peak doctored"
fi

# 08.1, one fake (review 19's route): the flag added and handed on, the lighthouse unchanged, and
# the launcher holding the replacement back until the others have finished, so that it comes too late.
solved 08.1
python3 - "$scratch/course/08_fault_tolerance/quorum.cpp" "$scratch/course/08_fault_tolerance/launch.cpp" <<'PY'
import sys
quorum, launch = sys.argv[1], sys.argv[2]
s = open(quorum).read()
cond = "  if (o.shrink_only && s.previous) {"
assert cond in s, "08.1's solution is gone from quorum.cpp: update this test"
hold = '(std::getenv("DDP_FAKE") && std::string(std::getenv("DDP_FAKE")) == "hold")'
open(quorum, "w").write("#include <cstdlib>\n" + s.replace(cond, "  if (o.shrink_only && s.previous && !" + hold + ") {"))
s = open(launch).read()
wait = "      if (now < replace_at[k]) continue;"
assert wait in s, "the launcher's replacement loop is gone from launch.cpp: update this test"
open(launch, "w").write(s.replace(wait, "      if (now < replace_at[k] || (" + hold + " && o.quorum.shrink_only && running() > 0)) continue;"))
PY
# And student review 20's: the lighthouse keeping out whoever was not in the *first* quorum, not
# the last (DDP_FAKE=first; the launcher untouched): a member dropped and back must stay out.
python3 - "$scratch/course/08_fault_tolerance/quorum.cpp" <<'PY'
import sys
quorum = sys.argv[1]
s = open(quorum).read()
keep, kept = "      for (const Member& m : s.previous->members)", "    std::vector<Member> kept;"
assert keep in s and kept in s, "08.1's solution's filter is gone from quorum.cpp: update this test"
s = s.replace(kept, kept + "\n    static const std::vector<Member> first_quorum = s.previous->members;  // the fake: the first quorum, kept")
open(quorum, "w").write(s.replace(keep, """      for (const Member& m : std::getenv("DDP_FAKE") && std::string(std::getenv("DDP_FAKE")) == "first" ? first_quorum : s.previous->members)"""))
PY
if fake_build 08_fault_tolerance; then
  faked hold 08.1 "a lighthouse started by hand with --shrink-only let r2 back" "the launcher holding the replacement back, the lighthouse unchanged"
  faked first 08.1 "a lighthouse started by hand with --shrink-only let r2 back" "the first quorum's members let in, not the last's"
fi

# 6. Programs of the checks' names first on PATH (the student's route: a `timeout` that prints
# the lines a check reads, a `python3` that prints its figures): exercise.sh and the checks run
# the system's, so each fake is never started and a wrong answer still FAILs as wrong.
mkdir -p "$scratch/fake"
for tool in timeout python3 git grep sed; do
  printf '#!/bin/sh\ntouch "%s/used-%s"\necho "PASS faked"\n' "$scratch" "$tool" > "$scratch/fake/$tool"
  chmod +x "$scratch/fake/$tool"
done
for id in 01.1 04.2; do
  read -r first rest <<< "$(truth "$id")"
  out=$(PATH="$scratch/fake:$PATH" check "$id" "$((first + 1)) $rest")
  used=$(cd "$scratch" && ls used-* 2>/dev/null | sed 's/^used-//' | tr '\n' ' ')
  rm -f "$scratch"/used-*
  if [[ $out == "FAIL $id: "* && -z $used ]]; then
    echo "ok $id: fakes of timeout, python3, git, grep and sed first on PATH are never run: $out"
  else
    echo "GAMED $id: with fakes first on PATH (run: ${used:-none}): '$out'"; bad=1
  fi
done

[ $bad = 0 ] && echo "PASS: every gaming route tried FAILs"
exit $bad
