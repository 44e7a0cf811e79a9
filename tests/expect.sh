# Sourced by the shell tests (tests/flavours_test.sh, tests/setup_test.sh): a failure counted and
# said, and one command's exit status and output checked. The test ends with
# `exit $((failures > 0))`.
failures=0
fail() { echo "FAILED: $*"; failures=$((failures + 1)); }

# expect NAME RC PATTERN... -- CMD...: runs CMD, checks its exit status and that its output
# (stdout and stderr) holds each PATTERN (grep -E), or lacks it when PATTERN starts with '!'.
expect() {
  local name=$1 want_rc=$2 patterns=() out rc p
  shift 2
  while [ "$1" != -- ]; do patterns+=("$1"); shift; done
  shift
  out=$("$@" 2>&1); rc=$?
  echo "--- $name: exit $rc"
  printf '%s\n' "$out" | sed 's/^/    /'
  [ "$rc" = "$want_rc" ] || fail "$name: exit $rc, expected $want_rc"
  for p in "${patterns[@]}"; do
    if [ "${p:0:1}" = "!" ]; then
      ! grep -qE -- "${p:1}" <<< "$out" || fail "$name: the output holds '${p:1}'"
    else
      grep -qE -- "$p" <<< "$out" || fail "$name: the output lacks '$p'"
    fi
  done
}

