# defines: what every exercise check uses (sourced by exercises/checks/<id>.sh; see exercises/README.md).
#
# A check is a bash script that runs the course's programs and decides PASS (exit 0) or FAIL
# (exit 1, after saying what is missing). It reads:
#   DDP_BUILD    the build folder whose programs it runs (scripts/exercise.sh sets it)
#   DDP_ANSWERS  the answers file of the observation exercises (default exercises/answers.txt)
#   WORK         a fresh scratch folder for its runs (made here, removed at exit)
set -uo pipefail
# The system's tools, not the caller's PATH: a check's timeout, python3, grep and sed are
# Debian's, so a program of the same name put first on PATH cannot stand in for them.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
# A port or address the student exported (docs/teaching.md gives each student their own port)
# would fix the launchers' port: a check beside the student's own run would meet it. Unset, the
# launchers let the operating system pick a free port.
unset MASTER_ADDR MASTER_PORT
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
B=${DDP_BUILD:-$ROOT/build-cpu}
ANSWERS=${DDP_ANSWERS:-$ROOT/exercises/answers.txt}
ID=$(basename "$0" .sh)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/exercise-$ID.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
# The CPU kernels the pages' figures were made with: a check that compares figures must see the
# same digits.
source "$ROOT/scripts/kernels.sh"

pass() { echo "PASS $ID: $*"; exit 0; }
fail() { echo "FAIL $ID: $*"; exit 1; }

# In a handout an observation check runs the course as handed out, which scripts/exercise.sh
# builds into .given/ and runs this script from (Note [Observations of the course as handed out]);
# started otherwise, it would read the student's build.
source "$ROOT/scripts/handout.sh"
if [ "$(sed -n 's/^# kind: *//p' "$0" | head -n 1)" = observation ] && handout_commit "$ROOT" > /dev/null; then
  fail "an observation check runs the course as handed out: check it with scripts/exercise.sh $ID"
fi

# run <seconds> <log> <program> [args...]: runs a program of the build with a time limit, its
# output (stdout and stderr) into <log>; returns its exit code (124: it ran past the limit).
run() {
  local limit=$1 log=$2; shift 2
  local prog=$1; shift
  [ -x "$B/$prog" ] || { echo "FAIL $ID: $B/$prog not found: build the course first (scripts/run.sh)"; exit 1; }
  (cd "$WORK" && timeout -k 5 "$limit" "$B/$prog" "$@") > "$log" 2>&1
}

# read_answer <id>: sets ANSWER to the student's answer to an observation exercise, from the
# answers file (the text after "<id>:" on its line, trimmed); FAIL when there is none yet.
read_answer() {
  ANSWER=$(grep -E "^$1:" "$ANSWERS" 2>/dev/null | head -n 1 | sed -e 's/^[^:]*://' -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//')
  [ -n "$ANSWER" ] || fail "no answer yet: write it after \"$1:\" in ${ANSWERS#$ROOT/}"
}

# check_two_parts <form> <first part> <its truth> <second part> <its truth> [hint]: an answer of
# numbers, its last against the second part and those before it against the first. A FAIL never
# says which part is wrong (an answer found half by half is guessed, not worked out): it names
# both parts (and the hint), or, when the answer is not numbers, how to write it (<form>).
check_two_parts() {
  local form=$1 name1=$2 truth1=$3 name2=$4 truth2=$5 hint=${6:+: $6} answer
  answer=$(echo $ANSWER)
  [[ $answer =~ ^[0-9]+( [0-9]+)+$ ]] || fail "you wrote '$ANSWER'; write $form"
  [ "${answer% *}" = "$truth1" ] && [ "${answer##* }" = "$truth2" ] ||
    fail "'$answer' is not right: $name1, then $name2, both from what the chapter teaches$hint"
}

# fingerprint <log> <rank>/<world>: the parameters' fingerprint that rank printed (empty if none).
fingerprint() { sed -n "s|^\[rank $2\] params fingerprint \([0-9a-f]*\).*|\1|p" "$1"; }

# bucket_count <line>: the number of buckets in a "buckets rebuilt ..." line of 05_ddp.
bucket_count() { sed -n 's/.*became ready: \([0-9]*\) buckets\{0,1\}:.*/\1/p' <<< "$1"; }

# backend_count <log> <rank>/<world>: sets COUNT to what that rank's backend counted, from the
# line it prints as the rank leaves (Note [Counted by the backend]): "collectives all-reduces
# bytes sends receives broadcasts", empty when the rank did not print it; and SENT_BYTES to what
# its sends carried (its own line, printed when it sent), else empty. FAILs when the rank printed
# either line more than once: only the backend prints them, once.
backend_count() {
  local said
  said=$(grep -c "^\[rank $2\] the process group ran .*(DDP_COUNT_COLLECTIVES)" "$1")
  [ "$said" -le 1 ] || fail "rank ${2%/*} said $said times what its process group ran: only the backend says it, once, as the rank leaves"
  said=$(grep -c "^\[rank $2\] its sends carried .*(DDP_COUNT_COLLECTIVES)" "$1")
  [ "$said" -le 1 ] || fail "rank ${2%/*} said $said times what its sends carried: only the backend says it, once, as the rank leaves"
  SENT_BYTES=$(sed -n "s|^\[rank $2\] its sends carried \([0-9]*\) bytes in all (DDP_COUNT_COLLECTIVES)\$|\1|p" "$1")
  COUNT=$(sed -n "s|^\[rank $2\] the process group ran \([0-9]*\) collectives: \([0-9]*\) all-reduces of \([0-9]*\) bytes in all, \([0-9]*\) sends, \([0-9]*\) receives, \([0-9]*\) broadcasts (DDP_COUNT_COLLECTIVES)\$|\1 \2 \3 \4 \5 \6|p" "$1")
}

# last_match <regex> <file>: the last line of <file> matching <regex> (empty if none).
last_match() { grep -E "$1" "$2" | tail -n 1; }
