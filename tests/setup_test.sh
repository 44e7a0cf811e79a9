#!/usr/bin/env bash
# scripts/setup.sh with apt busy (Note [Waiting for apt] in scripts/setup.sh), as on a fresh VM
# at first boot: it waits, saying so, and installs once apt is free; it stops after
# DDP_APT_WAIT seconds, or at once on another error, with apt's own error line, exit 2.
# apt-get, dpkg-query and id are stand-ins on PATH (nothing is installed); setup.sh runs from a
# copy of scripts/, so its log is the copy's, not this checkout's setup.log.
# Usage: tests/setup_test.sh [repository root]
set -uo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
scratch=$(mktemp -d /tmp/ddp-setup-test.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
source "$(dirname "$0")/expect.sh"  # fail, expect
mkdir -p "$scratch/course/scripts" "$scratch/bin"
cp "$root"/scripts/*.sh "$scratch/course/scripts/"

# The stand-ins. dpkg-query: every package missing. id -u: root. apt-get: busy (apt's own
# refusal, as Debian 12's apt prints it) for the first $BUSY calls, then $THEN (ok, or an error).
cat > "$scratch/bin/dpkg-query" <<'S'
#!/bin/sh
exit 1
S
cat > "$scratch/bin/id" <<'S'
#!/bin/sh
[ "$1" = -u ] && { echo 0; exit 0; }
exec /usr/bin/id "$@"
S
cat > "$scratch/bin/apt-get" <<'S'
#!/bin/sh
n=$(cat "$CALLS" 2>/dev/null || echo 0); n=$((n + 1)); echo $n > "$CALLS"
echo "apt-get $*" >> "$CALLS.log"
if [ "$n" -le "$BUSY" ]; then
  echo "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 812 (unattended-upgr)"
  echo "E: Unable to lock directory /var/lib/apt/lists/"
  exit 100
fi
[ "$THEN" = ok ] && exit 0
[ "$1" = update ] && exit 0
echo "E: Unable to locate package libtorch-dev"
exit 100
S
chmod +x "$scratch"/bin/*

# case NAME BUSY THEN WAIT RC PATTERN...: setup.sh cpu with the stand-ins, its exit status and
# output checked as expect does (a PATTERN starting with '!' must be absent).
case_() {
  local name=$1 busy=$2 then=$3 wait=$4 want_rc=$5
  shift 5
  rm -f "$scratch/calls" "$scratch/calls.log"
  expect "$name" "$want_rc" "$@" -- env PATH="$scratch/bin:$PATH" CALLS="$scratch/calls" BUSY="$busy" THEN="$then" \
    DDP_APT_WAIT="$wait" timeout 60 "$scratch/course/scripts/setup.sh" cpu
  echo "    (apt-get was called $(cat "$scratch/calls" 2>/dev/null || echo 0) times)"
}

# Busy for two tries (10 s), then free: two waits said, the install done. The first wait says 0 s,
# or 1 s when bash's whole-second clock ticked between the start and apt's first refusal (seen
# once in a loaded CI run).
case_ "busy, then free" 2 ok 60 0 \
  "waiting for another apt to finish \([01] s of 60\): Could not get lock /var/lib/apt/lists/lock. It is held by process 812 \(unattended-upgr\)" \
  "waiting for another apt to finish \([5-9] s of 60\)" "\[setup\] ready: cpu" "!error"
grep -q -- "install -y -qq --no-install-recommends g\+\+" "$scratch/calls.log" || fail "busy, then free: apt-get install was not called with the packages"
# Busy past DDP_APT_WAIT: stops, saying how long it waited and who holds the lock.
case_ "busy past the wait" 99 ok 4 2 \
  "E: apt was still busy after 4 s \(DDP_APT_WAIT\)" "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 812" \
  "!ready"
# Another error: no wait, apt's own line, not only the log's name.
case_ "another error" 0 broken 60 2 "E: Unable to locate package libtorch-dev" "!waiting" "!ready"
# A wait that is not a number: exit 2 before apt.
case_ "a bad DDP_APT_WAIT" 0 ok ten 2 "DDP_APT_WAIT must be a number of seconds, not 'ten'"
[ ! -e "$scratch/calls.log" ] || fail "a bad DDP_APT_WAIT: apt-get was called"

[ $failures = 0 ] && echo "PASSED: setup.sh waits for a busy apt, and stops with apt's own error"
exit $((failures > 0))
