#!/usr/bin/env bash
# Checks an exercise of the course: builds what it needs, runs its check, says PASS or FAIL.
#
#   scripts/exercise.sh list              every exercise: id, kind, time, title
#   scripts/exercise.sh 01.2              build (incrementally) and check exercise 01.2
#   scripts/exercise.sh all [chapter]     check every exercise (of one chapter: all 03): a summary
#   scripts/exercise.sh --solution 01.2   show its solution: a patch, or the expected answer
#   scripts/exercise.sh --handout DIR     a copy for students: no solutions, a git repository
#
# The checks live in exercises/checks/<id>.sh and exercises/README.md says how they work.
# Environment: DDP_BUILD (the build folder, default build-cpu; build-cuda for the cuda flavour),
# DDP_ANSWERS (your answers file, default exercises/answers.txt), DDP_EXERCISE_NO_BUILD=1 (check
# the build as it is: the tests use it).
set -uo pipefail
export PATH=/usr/sbin:/usr/bin:/sbin:/bin  # the system's git, cmake and compilers (as lib.sh's checks)
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/stop.sh"  # Ctrl-C or SIGTERM: the check and its trainers stop too
checks=$root/exercises/checks
usage() {
  sed -n '4,8p' "$0" | sed 's/^# *//' >&2
  exit 2
}
field() { sed -n "s/^# $1: *//p" "$2" | head -n 1; }
exists() {
  [[ $1 =~ ^[0-9][0-9]\.[0-9]+$ ]] && [ -f "$checks/$1.sh" ] && return 0
  echo "no exercise '$1': scripts/exercise.sh list shows them all" >&2
  exit 2
}

[ $# -ge 1 ] || usage
case $1 in
  list)
    for f in $(printf '%s\n' "$checks"/0*.sh | sort -V); do  # 05.2 before 05.10, as the pages list them
      id=$(basename "$f" .sh)
      printf '%-5s %-12s %-7s %s\n' "$id" "$(field kind "$f")" "$(field time "$f")" "$(field exercise "$f" | sed 's/^[0-9.]* *//')"
    done
    exit 0 ;;
  --solution)
    [ $# -eq 2 ] || usage
    exists "$2"
    if [ ! -d "$root/exercises/solutions" ]; then
      echo "This copy of the course has no solutions (your teacher keeps them)." >&2
      exit 2
    fi
    if [ "$(field kind "$checks/$2.sh")" = observation ]; then
      grep -E "^$2:" "$root/exercises/solutions/answers.txt"
      sed -n "/^# $2 why/,/^\$/p" "$root/exercises/solutions/answers.txt" | sed '/^$/d'
    else
      cat "$root/exercises/solutions/$2.patch"
      echo "# apply it to your copy with: git apply exercises/solutions/$2.patch" >&2
    fi
    exit 0 ;;
  --handout)
    [ $# -eq 2 ] || usage
    dest=$2
    [ -e "$dest" ] && { echo "--handout: $dest exists: name a new folder" >&2; exit 2; }
    git -C "$root" rev-parse --git-dir > /dev/null 2>&1 || { echo "--handout: $root is not a git clone" >&2; exit 2; }
    mkdir -p "$dest"
    # The committed course, less the solutions; a teacher's uncommitted edits stay out too.
    git -C "$root" archive HEAD | tar -x -C "$dest" --exclude=exercises/solutions
    # exercises/README.md for a copy without solutions: its --solution row and its last section,
    # "## Solutions" (which says how to apply them), replaced by what holds in the handout.
    readme=$dest/exercises/README.md
    sed -i '/^| `scripts\/exercise.sh --solution /c\| `scripts/exercise.sh --solution 01.2` | in this copy: says that your teacher keeps the solutions |' "$readme"
    sed -i -e '/^## Solutions$/,$d' -e '/^<!-- Keep this section last/d' "$readme"
    cat >> "$readme" <<'EOF'
## Solutions
This copy of the course comes without them: your teacher keeps them
(`scripts/exercise.sh --solution <id>` says so). A check that says `PASS` is the proof that you
solved an exercise; one that says `FAIL` says what it looked for. This folder is a git
repository whose first commit is the course as handed out: `git diff` shows everything you
changed since.
EOF
    # A git repository with that first commit, so that `git diff` and `git checkout -- <file>`
    # (exercises/README.md, "When a check says FAIL") work in every student's copy of it.
    short=$(git -C "$root" rev-parse --short HEAD)
    name=$(git -C "$root" config user.name || echo "ddp-course")
    email=$(git -C "$root" config user.email || echo "ddp-course@localhost")
    { git -c init.defaultBranch=main init -q "$dest" && git -C "$dest" add -A -f &&
      git -C "$dest" -c user.name="$name" -c user.email="$email" commit -q -m "The course as handed out (commit $short, without exercises/solutions)"; } ||
      { echo "--handout: could not make $dest a git repository" >&2; exit 1; }
    echo "handout: $dest (commit $short, without exercises/solutions; a git repository with it as the first commit)"
    exit 0 ;;
  all)
    # Every exercise (or one chapter's), one line each: what a teacher reads to grade a copy.
    [ $# -le 2 ] || usage
    passed=0 total=0
    for f in "$checks"/${2:-0}*.sh; do
      [ -f "$f" ] || { echo "no exercises for chapter '${2:-}'" >&2; exit 2; }
      id=$(basename "$f" .sh)
      line=$("$0" "$id" 2>&1 | grep -E "^(PASS|FAIL) $id" | tail -n 1)
      echo "${line:-FAIL $id: the check printed no verdict}"
      total=$((total + 1))
      [[ $line == PASS* ]] && passed=$((passed + 1))
    done
    echo "$passed of $total exercises passed"
    [ "$passed" = "$total" ]
    exit $? ;;
  -h|--help) usage ;;
esac

[ $# -eq 1 ] || usage
id=$1
exists "$id"
check=$checks/$id.sh
export DDP_BUILD=${DDP_BUILD:-$root/build-cpu}
export DDP_ANSWERS=${DDP_ANSWERS:-$root/exercises/answers.txt}
targets=$(field build "$check")
# Note [Observations of the course as handed out]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# An observation check compares an answer with what the course's programs print. A student's
# build may print something else: a coding exercise's work, or a line faked to print what an
# answer needs (and a faked binary outlives its source put back). So in a handout (a git
# repository whose first commit is the course as handed out, --handout below) every observation
# check runs that commit: its own check script, and its programs built from that commit into
# .given/build-<flavour> (the first time a few minutes, then only what changed), never the
# student's. lib.sh refuses an observation check started in a handout without this script.
# Coding checks run the student's build: it is their work.
source "$root/scripts/handout.sh"
kind=$(field kind "$check")
# copy_given <first commit>: that commit's files into .given/, each copied only when it differs (a
# build there then makes only what changed).
given=$root/.given
given_tmp=""  # copy_given's scratch folder: a global, which the EXIT trap still sees after the function returned
trap 'rm -rf "${given_tmp:-}"' EXIT  # also when stopped half-way (stop.sh exits through it)
copy_given() {
  local f
  given_tmp=$(mktemp -d "${TMPDIR:-/tmp}/given.XXXXXX")
  git -C "$root" archive "$1" | tar -x -C "$given_tmp"
  (cd "$given_tmp" && find . -type f -printf '%P\n') | while read -r f; do
    cmp -s "$given_tmp/$f" "$given/$f" || { mkdir -p "$(dirname "$given/$f")" && cp "$given_tmp/$f" "$given/$f"; }
  done
  rm -rf "$given_tmp"
  given_tmp=""
}
# A copy without the solutions is a handout; without its git history it cannot say what was handed out.
if [ "$kind" = observation ] && [ ! -d "$root/exercises/solutions" ] && ! handout_commit "$root" > /dev/null; then
  echo "FAIL $id: this copy has no solutions and no git history of the course as handed out (its .git): an observation check runs that course, so restore .git or ask your teacher for a new handout"
  exit 2
fi
if [ "$kind" = observation ] && first=$(handout_commit "$root"); then
  flavour=cpu
  [[ ${DDP_BUILD%/} == *build-cuda ]] && flavour=cuda
  echo "exercise $id: an observation check runs the course as handed out (not your changes), built in .given/build-$flavour"
  # DDP_EXERCISE_NO_BUILD (the course's own tests) skips this only while nothing is built there:
  # a build in .given/ is always made again from the first commit first, so that a program faked
  # in it does not stay.
  if [ "${DDP_EXERCISE_NO_BUILD:-0}" != 1 ] || [ -d "$given/build-$flavour" ]; then
    copy_given "$first"
    # Its programs linked again each time (seconds): one put in their place does not stay.
    for t in $targets; do rm -f "$given/build-$flavour/$t"; done
    echo "exercise $id: building $targets in .given/build-$flavour (log: .given/build.log) ..."
    DDP_VENV=${DDP_VENV:-$root/.venv} "$given/scripts/build.sh" "$flavour" $targets > "$given/build.log" 2>&1 &
    if ! wait $!; then
      tail -n 20 "$given/build.log"
      echo "FAIL $id: the build of the course as handed out failed (whole log: .given/build.log)"
      exit 1
    fi
  fi
  [ -f "$given/exercises/checks/$id.sh" ] && [ -d "$given/build-$flavour" ] ||
    { echo "FAIL $id: the course as handed out is not in .given/ (run the check without DDP_EXERCISE_NO_BUILD)"; exit 1; }
  export DDP_BUILD=$given/build-$flavour
  check=$given/exercises/checks/$id.sh
elif [ "${DDP_EXERCISE_NO_BUILD:-0}" != 1 ]; then
  if [ ! -f "$DDP_BUILD/Makefile" ]; then
    echo "No build in $DDP_BUILD yet: run scripts/run.sh (or scripts/build.sh cpu) first." >&2
    exit 2
  fi
  # In a handout, the student's own programs are linked again each time (seconds), so that a
  # program copied in from another build does not stay (not in the course's shared build folders,
  # whose programs other tests may be running).
  if handout_commit "$root" > /dev/null && [[ $(cd "$DDP_BUILD" && pwd -P)/ == "$(cd "$root" && pwd -P)"/* ]]; then
    for t in $targets; do rm -f "$DDP_BUILD/$t"; done
  fi
  echo "exercise $id: building $targets in ${DDP_BUILD#$root/} ..."
  cmake --build "$DDP_BUILD" -j2 --target $targets > "$DDP_BUILD/exercise-build.log" 2>&1 &
  if ! wait $!; then  # in the background, so that a stop is not held until the build ends
    grep -E "error|Error" "$DDP_BUILD/exercise-build.log" | head -n 20
    echo "FAIL $id: the build failed (whole log: ${DDP_BUILD#$root/}/exercise-build.log)"
    exit 1
  fi
fi
# Note [A coding check as handed out]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A coding check judges the student's build, but in a handout not with the student's copy of the
# check: its script and lib.sh are the first commit's (in .given/), so a check edited to say PASS
# is not the one that runs. And what it counts with must be as handed out too: the files its
# `# trusts:` line names (the backend's count of what ran, the trace's logged lines) are compared
# with the first commit, and a copy that changes them is refused, naming them (a student made
# the backend's count of 07.1's sends say what the check wanted).
if [ "$kind" = coding ] && first=$(handout_commit "$root"); then
  copy_given "$first"
  check=$given/exercises/checks/$id.sh
  trusts=$(field trusts "$check")
  changed=""  # no `# trusts:` line, nothing to compare (git diff with no path would list every change)
  [ -z "$trusts" ] || changed=$(git -C "$root" diff --name-only "$first" -- $trusts | tr '\n' ' ')
  if [ -n "$changed" ]; then
    echo "FAIL $id: this check counts what ran with files as handed out, and your copy changes ${changed% }: put them back (git checkout $(git -C "$root" rev-parse --short "$first") -- ${changed% }) and check again"
    exit 1
  fi
fi
echo "exercise $id: $(field exercise "$check" | sed 's/^[0-9.]* *//')"
bash "$check" &
wait $!
