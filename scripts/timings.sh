# Sourced by test.sh: how long each phase took, kept for the next run's estimates, and the
# summary that names the slowest tests (docs/tests.md, "Test time").
#
#   phase_estimate KEY FALLBACK   "about N min (the last run here)" from times.txt, else FALLBACK
#   phase_record KEY SECONDS      keeps one phase's time for the next run (times.txt)
#   slowest_tests LOG N           the N slowest tests of a ctest log: "name  12.3 s" a line
#   time_summary                  the phase times and each flavour's slowest tests, for the end
#
# times.txt sits in the build folders' parent (the repository), one "KEY SECONDS" line a phase
# (setup, build-cpu, test-cpu, ...); a full build and an incremental one are kept apart
# (build-cpu-first, build-cpu), since their times differ tenfold.
times_file=${DDP_TIMES_FILE:-$root/build-times.txt}

# "12 min 5 s" or "45 s".
minutes() { local s=$1; [ "$s" -ge 60 ] && echo "$((s / 60)) min $((s % 60)) s" || echo "$s s"; }

# The last run's seconds for KEY, or nothing (status 0 either way: test.sh runs under set -e).
phase_last() {
  [ -f "$times_file" ] || return 0
  awk -v k="$1" '$1 == k { s = $2 } END { if (s != "") print s }' "$times_file"
}

phase_estimate() {
  local last
  last=$(phase_last "$1")
  if [ -n "$last" ]; then echo "about $(minutes "$last") (the last run here)"; else echo "$2"; fi
}

phase_record() {
  local tmp
  touch "$times_file"
  tmp=$(mktemp)
  awk -v k="$1" '$1 != k' "$times_file" > "$tmp"
  echo "$1 $2" >> "$tmp"
  mv "$tmp" "$times_file"
}

# ctest's result lines: " 12/293 Test  #74: Name ......   Passed    8.63 sec".
slowest_tests() {
  sed -nE 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+) .* ([0-9]+\.[0-9]+) sec$/\2 \1/p' "$1" |
    sort -rn | head -n "$2" | awk '{ printf "%s %.0f s\n", $2, $1 }'
}

# Each phase as this run timed it, against the last run's where there was one (so that a change
# that slows the tests shows in its own run), then the slowest tests of each flavour.
time_summary() {
  local line="" k s before
  for k in "${phase_keys[@]}"; do
    s=${phase_secs[$k]}
    before=${phase_before[$k]:-}
    line+="${line:+, }$k $(minutes "$s")"
    if [ -n "$before" ] && [ "$before" -gt 0 ]; then line+=" (last run $(minutes "$before"))"; fi
  done
  local all=$((SECONDS - run_start))
  echo "== phases: $line; $(minutes "$all") in all"
  # CI stops at 90 minutes; a fresh clone must stay under half of it on CI's slowest machine.
  [ "$all" -le 2700 ] || echo "== over the 45-minute budget of a fresh clone (docs/tests.md, \"Test time\"): the slowest tests are below"
  for f in $flavours; do
    [ -f "$root/build-$f/ctest.log" ] || continue
    # Both lanes' tests (Note [Tests that wait, in a lane of their own] in test.sh); a flavour
    # without the second lane has no log of it (set -e does not reach into <(...)).
    echo "== slowest $f tests: $(slowest_tests <(cat "$root/build-$f/ctest.log" "$root/build-$f/ctest-waits.log" 2>/dev/null) 5 | paste -sd ',' | sed 's/,/, /g')"
  done
}

# What each phase took this run, in order; the last run's, read before this one overwrites them.
declare -A phase_secs phase_before
phase_keys=()
run_start=$SECONDS
phase_done() {  # phase_done KEY SECONDS
  phase_before[$1]=$(phase_last "$1")
  phase_secs[$1]=$2
  phase_keys+=("$1")
  phase_record "$1" "$2"
}
