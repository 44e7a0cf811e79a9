# Sourced: writes one result file, results/NAME.json (Note [Every figure has its source] in
# tests/test_pages.cpp): the figures a script measured, with the command that measured them, the
# machine's CPU and the date inside, so that a page can cite the file and a test can hold the
# page's numbers to it. A page never restates a run by hand; the file is rewritten by its script.
#
#   write_result NAME "COMMAND" 'JSON MEMBERS'
#     write_result one_vs_two_ranks "bench/one_vs_two_ranks.sh" '"mlp": {"1": 18900, "2": 14500}'
#
# The file is replaced atomically (written beside it, then renamed). The course's own results/ is
# rewritten only when asked, DDP_RECORD_RESULTS=1: a learner's run, or a test's, leaves the files
# the pages cite as they are, and writes to $TMPDIR/ddp-results (or DDP_RESULTS_DIR) instead.
result_cpu() {
  local name
  name=$(LC_ALL=C lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n 1)
  echo "${name:-unknown CPU}, $(nproc --all) cores, $(uname -m)"
}
write_result() {
  local name=$1 command=$2 members=$3
  local dir=${DDP_RESULTS_DIR:-}
  if [ -z "$dir" ]; then
    dir=${TMPDIR:-/tmp}/ddp-results
    [ "${DDP_RECORD_RESULTS:-}" != 1 ] || dir=$root/results
  fi
  mkdir -p "$dir"
  # JSON strings: a command may quote its own arguments.
  local quoted cpu
  quoted=$(printf '%s' "$command" | sed 's/\\/\\\\/g; s/"/\\"/g')
  cpu=$(result_cpu | sed 's/\\/\\\\/g; s/"/\\"/g')
  printf '{\n  "command": "%s",\n  "cpu": "%s",\n  "date": "%s",\n  %s\n}\n' \
    "$quoted" "$cpu" "$(date -u +%F)" "$members" > "$dir/$name.json.tmp"
  mv "$dir/$name.json.tmp" "$dir/$name.json"
  echo "wrote $dir/$name.json$([ "$dir" = "$root/results" ] || echo " (DDP_RECORD_RESULTS=1 writes the course's results/$name.json)")"
}

# One figure of a result file, by its keys (result_value first_run seconds_to_first_output), or
# nothing when the file or the figure is missing; a script's estimate says where it comes from.
result_value() {
  local name=$1
  shift
  python3 - "${DDP_RESULTS_DIR:-$root/results}/$name.json" "$@" 2>/dev/null <<'PY' || true
import json, sys
try:
    v = json.load(open(sys.argv[1]))
    for k in sys.argv[2:]:
        v = v[k]
    print(v)
except Exception:
    pass
PY
}

# "about 3 min 5 s on <the CPU that measured it> (results/NAME.json)" for one of a result's
# figures in seconds (result_estimate NAME FALLBACK KEY...), or FALLBACK (no figure) without it.
result_estimate() {
  local name=$1 fallback=$2 s cpu
  shift 2
  s=$(result_value "$name" "$@")
  cpu=$(result_value "$name" cpu)
  if [ -z "$s" ]; then echo "$fallback"; return; fi
  s=${s%.*}
  local t="$s s"
  [ "$s" -lt 60 ] || t="$((s / 60)) min $((s % 60)) s"
  echo "about $t on ${cpu:-the measuring machine} (results/$name.json)"
}
