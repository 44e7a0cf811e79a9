#!/usr/bin/env bash
# Proves one exercise's check both ways: it FAILs on the course as it is, and PASSes with the
# solution. Usage: tests/exercise_verify.sh <id> <build folder>   (ctest: Exercise.<id>)
#        tests/exercise_verify.sh --consistency <build folder> <ids registered in CMake...>
#        tests/exercise_verify.sh --handout <build folder>   (a copy without solutions)
#
# Note [Solutions kept true]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~
# An exercise rots when the course changes under it: its solution no longer applies or no
# longer passes, or its check starts passing on the untouched course (then a student "passes"
# by doing nothing). So CI runs every check twice:
#   - untouched: the build as it is, and the blank answers file (exercises/answers.txt): the
#     check must FAIL (exit 1) and say what is missing;
#   - solved: an observation exercise with exercises/solutions/answers.txt (or, when its answer
#     is the machine's own measurements, with what exercises/solutions/<id>.sh measures); a coding exercise on
#     a scratch copy of the course with exercises/solutions/<id>.patch applied, built by
#     tests/overlay_build.py, which compiles only the files the patch changed (and those that
#     include a changed header) with the build's own commands and precompiled header, and links
#     them with the build's libraries: seconds, where a build folder of the copy would compile
#     LibTorch's precompiled header and every library again. The check must PASS.
# A copy handed out without solutions (scripts/exercise.sh --handout) skips these tests, saying so.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
checks=$root/exercises/checks
field() { sed -n "s/^# $1: *//p" "$2" | head -n 1; }

if [ "${1:-}" = --consistency ]; then
  # Every check is registered, and every registered id has a check, its solution or answer,
  # a line in the blank answers file (observation) and a mention in its chapter's README.
  shift; build=$1; shift
  bad=0
  registered=" $* "
  for f in "$checks"/0*.sh; do
    id=$(basename "$f" .sh)
    [[ $registered == *" $id "* ]] || { echo "exercise $id has a check but no test: add it to DDP_EXERCISES in tests/CMakeLists.txt"; bad=1; }
  done
  for id in "$@"; do
    f=$checks/$id.sh
    [ -f "$f" ] || { echo "exercise $id is registered but has no check $f"; bad=1; continue; }
    for k in exercise kind time build proves; do
      [ -n "$(field $k "$f")" ] || { echo "$f has no '# $k:' line"; bad=1; }
    done
    # What a coding check counts with in a handout, as handed out (Note [A coding check as handed out]).
    for t in $(field trusts "$f"); do
      [ -f "$root/$t" ] || { echo "$f trusts $t, which is not in the course"; bad=1; }
    done
    case $(field kind "$f") in
      coding) [ -f "$root/exercises/solutions/$id.patch" ] || { echo "coding exercise $id has no exercises/solutions/$id.patch"; bad=1; } ;;
      observation)
        grep -qE "^$id:[[:space:]]*$" "$root/exercises/answers.txt" || { echo "exercises/answers.txt has no blank line '$id:'"; bad=1; }
        grep -qE "^$id:[[:space:]]*[^[:space:]]" "$root/exercises/solutions/answers.txt" || { echo "exercises/solutions/answers.txt has no answer for $id"; bad=1; } ;;
      *) echo "$f: kind must be coding or observation"; bad=1 ;;
    esac
    readme=$(ls -d "$root"/${id%%.*}_*/README.md 2> /dev/null | head -n 1)
    grep -q "scripts/exercise.sh $id" "$readme" || { echo "${readme#$root/} does not tell how to check exercise $id (scripts/exercise.sh $id)"; bad=1; }
  done
  # docs/teaching.md, the teacher's plan: every exercise in it (its counts are held by
  # Docs.CountsAreWhatTheyCount: no number of tests is typed there).
  teaching=$root/docs/teaching.md
  for id in "$@"; do
    grep -q "\b${id//./\\.}\b" "$teaching" || { echo "docs/teaching.md's plan does not name exercise $id"; bad=1; }
  done
  # and every test of the exercises as a whole that tests/CMakeLists.txt registers, which its
  # paragraph on ctest -R '^Exercise\.' lists.
  for t in $(grep -o 'add_test(NAME Exercise\.[A-Z][A-Za-z]*' "$root/tests/CMakeLists.txt" | sed 's/.* //'); do
    grep -q "\b$t\b" "$teaching" || { echo "docs/teaching.md does not name $t, which ctest -R '^Exercise\.' runs"; bad=1; }
  done
  [ $bad = 0 ] && echo "$# exercises: each has a check, a solution, its place in its chapter's README and in docs/teaching.md"
  exit $bad
fi

if [ "${1:-}" = --handout ]; then
  # A student's copy (scripts/exercise.sh --handout): the course without exercises/solutions, a
  # git repository with it as its first commit, whose exercises/README.md no longer describes the
  # solutions, whose checks still run and fail, whose --solution says the teacher keeps them, and
  # whose exercise tests skip.
  build=$2
  git -C "$root" rev-parse --git-dir > /dev/null 2>&1 || { echo "SKIPPED: not a git clone (--handout exports the committed course)"; exit 77; }
  scratch=$(mktemp -d "${TMPDIR:-/tmp}/exercise-handout.XXXXXX")
  trap 'rm -rf "$scratch"' EXIT
  "$root/scripts/exercise.sh" --handout "$scratch/h" || { echo "--handout failed"; exit 1; }
  [ -f "$scratch/h/scripts/exercise.sh" ] && [ -f "$scratch/h/exercises/checks/01.1.sh" ] || { echo "the handout lacks the course"; exit 1; }
  [ ! -e "$scratch/h/exercises/solutions" ] || { echo "the handout has exercises/solutions"; exit 1; }
  # A git repository whose one commit holds the whole handout (exercises/README.md sends
  # students to git diff and git checkout --), and a README without the solutions' instructions.
  commits=$(git -C "$scratch/h" rev-list --count HEAD 2>&1) && [ "$commits" = 1 ] ||
    { echo "the handout is not a git repository with one commit: $commits"; exit 1; }
  [ "$(git -C "$scratch/h" rev-parse --show-toplevel)" = "$(cd "$scratch/h" && pwd -P)" ] || { echo "the handout's git repository is not the handout itself"; exit 1; }
  [ -z "$(git -C "$scratch/h" status --porcelain)" ] || { echo "the handout's first commit lacks files: $(git -C "$scratch/h" status --porcelain | head -n 3)"; exit 1; }
  [ "$(git -C "$scratch/h" ls-files | wc -l)" = "$(git -C "$root" ls-tree -r --name-only HEAD | grep -vc '^exercises/solutions/')" ] ||
    { echo "the handout's first commit does not hold the committed course less exercises/solutions"; exit 1; }
  grep -nE 'exercises/solutions|git apply|solutions/' "$scratch/h/exercises/README.md" && { echo "the handout's exercises/README.md still describes the solutions (lines above)"; exit 1; }
  grep -q 'your teacher keeps them' "$scratch/h/exercises/README.md" || { echo "the handout's exercises/README.md does not say that the teacher keeps the solutions"; exit 1; }
  out=$("$scratch/h/scripts/exercise.sh" --solution 01.2 2>&1); code=$?
  [ $code = 2 ] && [[ $out == *"no solutions"* ]] || { echo "--solution in the handout: exit $code: $out"; exit 1; }
  out=$("$scratch/h/tests/exercise_verify.sh" 01.2 "$build" 2>&1); code=$?
  [ $code = 77 ] || { echo "the exercise test in the handout must skip (77), it exited $code: $out"; exit 1; }
  out=$(DDP_BUILD=$build DDP_EXERCISE_NO_BUILD=1 "$scratch/h/scripts/exercise.sh" 01.2 2>&1); code=$?
  [ $code = 1 ] && [[ $out == *"FAIL 01.2: "* ]] || { echo "check 01.2 in the handout: exit $code: $out"; exit 1; }
  # A coding check runs as handed out (Note [A coding check as handed out]): the student's copy
  # of it edited to PASS is not the one that runs, and a change to what it counts with is refused.
  sed -i '0,/^source .*lib.sh.*/s//&\npass "edited to pass"/' "$scratch/h/exercises/checks/01.2.sh"
  grep -q '^pass "edited to pass"' "$scratch/h/exercises/checks/01.2.sh" || { echo "could not edit the handout's check 01.2"; exit 1; }
  out=$(DDP_BUILD=$build DDP_EXERCISE_NO_BUILD=1 "$scratch/h/scripts/exercise.sh" 01.2 2>&1); code=$?
  [ $code = 1 ] && [[ $out == *"FAIL 01.2: "* ]] && [[ $out != *"edited to pass"* ]] ||
    { echo "check 01.2 in the handout, its copy edited to PASS: exit $code: $out"; exit 1; }
  echo "// a change" >> "$scratch/h/common/group/collective_count.cpp"
  out=$(DDP_BUILD=$build DDP_EXERCISE_NO_BUILD=1 "$scratch/h/scripts/exercise.sh" 01.2 2>&1); code=$?
  [ $code = 1 ] && [[ $out == *"FAIL 01.2: this check counts what ran with files as handed out, and your copy changes common/group/collective_count.cpp"* ]] ||
    { echo "check 01.2 in the handout, the backend's count changed: exit $code: $out"; exit 1; }
  git -C "$scratch/h" checkout -q -- common/group/collective_count.cpp exercises/checks/01.2.sh
  # A check without a `# trusts:` line compares nothing: the files its exercise changes are the
  # student's work (student review 20: 08.1's right answer was refused, every changed file named).
  echo "// a change" >> "$scratch/h/02_spawn/restarts.cpp"
  out=$(DDP_BUILD=$build DDP_EXERCISE_NO_BUILD=1 "$scratch/h/scripts/exercise.sh" 02.2 2>&1); code=$?
  [ $code = 1 ] && [[ $out == *"FAIL 02.2: "* ]] && [[ $out != *"files as handed out"* ]] && [[ $out != *"unbound variable"* ]] ||
    { echo "check 02.2 (no trusts line) in the handout, its exercise's file changed: exit $code: $out"; exit 1; }
  git -C "$scratch/h" checkout -q -- 02_spawn/restarts.cpp
  # An observation check runs the course as handed out, built in .given/ (Note [Observations of
  # the course as handed out]), never the student's build: here not built, it says so; and its
  # script started directly refuses.
  out=$(DDP_BUILD=$build DDP_EXERCISE_NO_BUILD=1 "$scratch/h/scripts/exercise.sh" 04.2 2>&1); code=$?
  [ $code = 1 ] && [[ $out == *"runs the course as handed out (not your changes), built in .given/build-cpu"* ]] &&
    [[ $out == *"FAIL 04.2: the course as handed out is not in .given/"* ]] ||
    { echo "observation check 04.2 in a handout: exit $code: $out"; exit 1; }
  out=$(DDP_BUILD=$build bash "$scratch/h/exercises/checks/04.2.sh" 2>&1); code=$?
  [ $code = 1 ] && [[ $out == *"FAIL 04.2: an observation check runs the course as handed out: check it with scripts/exercise.sh 04.2"* ]] ||
    { echo "observation check 04.2 started directly in a handout: exit $code: $out"; exit 1; }
  # Without its .git a handout cannot say what was handed out: refused, not run on the student's build.
  mv "$scratch/h/.git" "$scratch/h.git"
  out=$(DDP_BUILD=$build DDP_EXERCISE_NO_BUILD=1 "$scratch/h/scripts/exercise.sh" 04.2 2>&1); code=$?
  mv "$scratch/h.git" "$scratch/h/.git"
  [ $code = 2 ] && [[ $out == *"FAIL 04.2: this copy has no solutions and no git history"* ]] ||
    { echo "observation check 04.2 in a handout without its .git: exit $code: $out"; exit 1; }
  echo "handout: no solutions, and a README that says so; a git repository with the course as its one commit; --solution says so; the exercise tests skip; the checks run and FAIL untouched; a coding check runs as handed out, refusing a change to what it counts with; an observation check runs the course as handed out, only through exercise.sh, and not without the handout's .git"
  exit 0
fi

id=${1:?usage: tests/exercise_verify.sh <id> <build folder>}
build=$(cd "${2:?usage: tests/exercise_verify.sh <id> <build folder>}" && pwd)
check=$checks/$id.sh
[ -f "$check" ] || { echo "no check $check"; exit 1; }
if [ ! -d "$root/exercises/solutions" ]; then
  echo "SKIPPED: this copy of the course has no exercises/solutions (a student's handout)"
  exit 77
fi
kind=$(field kind "$check")
scratch=$(mktemp -d "${TMPDIR:-/tmp}/exercise-verify-$id.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
export DDP_EXERCISE_NO_BUILD=1

echo "== $id ($kind), untouched: must FAIL"
DDP_BUILD=$build DDP_ANSWERS=$root/exercises/answers.txt "$root/scripts/exercise.sh" "$id" > "$scratch/untouched.log" 2>&1
code=$?
cat "$scratch/untouched.log"
[ $code = 1 ] || { echo "VERIFY $id: the untouched course must FAIL (exit 1), it exited $code"; exit 1; }
grep -q "^FAIL $id: ..*" "$scratch/untouched.log" || { echo "VERIFY $id: the untouched course's FAIL line says nothing"; exit 1; }

echo "== $id ($kind), solved: must PASS"
# With a port exported that another process holds, as a student's ~/.bashrc may export their own
# port while their run holds it (docs/teaching.md): the check's launchers must not take it.
python3 -c 'import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(); print(s.getsockname()[1], flush=True); sys.stdout.close(); time.sleep(900)' > "$scratch/port" &
holder=$!
trap 'kill $holder 2> /dev/null; rm -rf "$scratch"' EXIT
for _ in $(seq 50); do [ -s "$scratch/port" ] && break; sleep 0.1; done
busy=(env MASTER_ADDR=127.0.0.1 MASTER_PORT=$(cat "$scratch/port"))
if [ "$kind" = observation ] && [ -x "$root/exercises/solutions/$id.sh" ]; then
  # An answer that is this machine's own measurements: the solution measures them, as the page
  # says, and the check measures again. A machine whose speed changes between the two (another
  # guest's load on the host: a run here measured one rank's step at 9.4 ms, and at 17.9 ms an
  # hour later) fails a right answer; so, once, both measure again. A check that fails a right
  # answer for any other reason fails twice.
  # 05.10's check runs on a build folder that keeps what its measuring programs printed
  # (tests/replay_build.sh): its gaming route below asks the check again on the same
  # measurements, without making them a third time.
  for attempt in 1 2; do
    answer=$("$root/exercises/solutions/$id.sh" "$build") || { echo "VERIFY $id: exercises/solutions/$id.sh failed"; exit 1; }
    echo "$id: $answer" > "$scratch/answers.txt"
    echo "exercises/solutions/$id.sh measured: $answer"
    kept=$build
    if [ "$id" = 05.10 ]; then
      kept=$scratch/kept$attempt
      "$root/tests/replay_build.sh" "$build" "$kept" 02_spawn 05_ddp || { echo "VERIFY $id: could not make $kept"; exit 1; }
    fi
    DDP_REPLAY_COUNTS=$scratch/counts$attempt DDP_BUILD=$kept DDP_ANSWERS=$scratch/answers.txt "${busy[@]}" "$root/scripts/exercise.sh" "$id"
    code=$?
    [ $code = 0 ] && break
    [ $attempt = 1 ] && echo "== $id: the check measured this machine otherwise than the solution did; both measure again, once"
  done
elif [ "$kind" = observation ]; then
  DDP_BUILD=$build DDP_ANSWERS=$root/exercises/solutions/answers.txt "${busy[@]}" "$root/scripts/exercise.sh" "$id"
  code=$?
else
  # The course as this build was made from it: tracked and untracked-but-not-ignored files.
  mkdir -p "$scratch/course"
  (cd "$root" && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -p -t "$scratch/course") ||
    { echo "VERIFY $id: could not copy the course"; exit 1; }
  # Its line numbers too: a student reads the patch (--solution), and git apply would take a hunk
  # found 50 lines away without a word.
  offsets=$(cd "$scratch/course" && patch -p1 --dry-run < "$root/exercises/solutions/$id.patch" | grep -i "offset\|fuzz")
  [ -z "$offsets" ] || { echo "VERIFY $id: exercises/solutions/$id.patch's line numbers are stale (regenerate it with git diff): $offsets"; exit 1; }
  (cd "$scratch/course" && git apply "$root/exercises/solutions/$id.patch") ||
    { echo "VERIFY $id: exercises/solutions/$id.patch no longer applies to the course"; exit 1; }
  python3 "$root/tests/overlay_build.py" "$build" "$root" "$scratch/course" "$scratch/bin" $(field build "$check") ||
    { echo "VERIFY $id: the solved course does not build"; exit 1; }
  # The copy's own check and lib (a solution never changes them), run against the copy's programs.
  DDP_BUILD=$scratch/bin DDP_ANSWERS=$root/exercises/answers.txt "${busy[@]}" "$root/scripts/exercise.sh" "$id"
  code=$?
fi
[ $code = 0 ] || { echo "VERIFY $id: the check must PASS with the solution, it exited $code"; exit 1; }
echo "VERIFY $id: FAILs untouched, PASSes solved"
# 05.10's gaming route (tests/exercise_gaming.sh, route 5) needs this machine's answer: it runs
# here with the one just measured, where a test of its own measured it again (half a minute of
# both cores, alone), and asks the check on the measurements it made just now (kept above).
if [ "$id" = 05.10 ]; then
  echo "== $id: its gaming route, with the answer measured above and the check's measurements kept"
  "$root/tests/exercise_gaming.sh" "$build" measured "$answer" "$kept" || { echo "VERIFY $id: its gaming route did not FAIL"; exit 1; }
fi
