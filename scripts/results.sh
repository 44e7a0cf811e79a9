# Sourced: writes one result file, results/NAME.json (Note [Every figure has its source] in
# tests/test_docs.cpp): the figures a script measured, with the command that measured them, the
# machine's CPU and the date inside, so that a page can cite the file and a test can hold the
# page's numbers to it. A page never restates a run by hand; the file is rewritten by its script.
#
#   write_result NAME "COMMAND" 'JSON MEMBERS'
#     write_result one_vs_two_ranks "bench/one_vs_two_ranks.sh" '"mlp": {"1": 18900, "2": 14500}'
#
# The file is replaced atomically (written beside it, then renamed).
result_cpu() {
  local name
  name=$(LC_ALL=C lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n 1)
  [ -n "$name" ] || name=$(sed -n 's/^model name\s*: *//p' /proc/cpuinfo | head -n 1)
  echo "${name:-unknown CPU}, $(nproc) cores, $(uname -m)"
}
write_result() {
  local name=$1 command=$2 members=$3
  local dir=${DDP_RESULTS_DIR:-$root/results}
  mkdir -p "$dir"
  printf '{\n  "command": "%s",\n  "cpu": "%s",\n  "date": "%s",\n  %s\n}\n' \
    "$command" "$(result_cpu)" "$(date -u +%F)" "$members" > "$dir/$name.json.tmp"
  mv "$dir/$name.json.tmp" "$dir/$name.json"
  echo "wrote $dir/$name.json"
}
