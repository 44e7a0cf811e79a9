#!/usr/bin/env bash
# A build folder that stands in for BUILD and replays what some of its programs printed: asked a
# check a second time, a test gets the same observation without running (or waiting for) them
# again. Used where a test asks one check twice about one observation (tests/exercise_gaming.sh:
# 06.2's and 06.3's simulated Slurm jobs; 05.10's measurements, recorded by Exercise.05.10).
# Usage: tests/replay_build.sh BUILD FOLDER PROGRAM...
# FOLDER gets a link to each program of BUILD, and for each PROGRAM named a script that, the first
# time it is started with some arguments, runs BUILD's program and passes on what it prints (stdout
# and stderr together, as the checks log them), keeping it and its exit code in FOLDER/runs/ once
# it has ended; after that it prints what it kept, without running it (a run cut short, by a
# timeout, is not kept). The arguments are compared with the check's scratch folder
# (<TMPDIR>/exercise-<id>.XXXXXX, new each time a check runs) left out, wherever it stands in one.
# With DDP_REPLAY_COUNTS set to a folder (a fresh one each time the check runs), the same arguments
# started again in one run are told apart by their order (05.10 measures three times with the same
# arguments). What a program writes to files, its environment and its folder are not compared or
# kept: a check that reads more than a program's output cannot be replayed.
set -euo pipefail
build=$(cd "${1:?usage: tests/replay_build.sh BUILD FOLDER PROGRAM...}" && pwd)
folder=${2:?usage: tests/replay_build.sh BUILD FOLDER PROGRAM...}
shift 2
mkdir -p "$folder/runs"
folder=$(cd "$folder" && pwd)
for p in "$build"/*; do
  [ -f "$p" ] && [ -x "$p" ] && ln -sfn "$p" "$folder/"
done
for prog in "$@"; do
  [ -x "$build/$prog" ] || { echo "replay_build.sh: no program $build/$prog" >&2; exit 2; }
  rm -f "$folder/$prog"
  cat > "$folder/$prog" <<EOF
#!/usr/bin/env bash
# Replays $build/$prog (tests/replay_build.sh).
key=\$(printf '%s\n' "\$@" | sed -E 's#[^= ]*/exercise-[0-9]+\.[0-9]+\.[A-Za-z0-9]{6}#<scratch>#g' | sha1sum | cut -c1-16)
n=0
if [ -n "\${DDP_REPLAY_COUNTS:-}" ]; then
  mkdir -p "\$DDP_REPLAY_COUNTS"
  n=\$(cat "\$DDP_REPLAY_COUNTS/$prog.\$key" 2>/dev/null || echo 0)
  echo \$((n + 1)) > "\$DDP_REPLAY_COUNTS/$prog.\$key"
fi
kept="$folder/runs/$prog.\$key.\$n"
if [ ! -f "\$kept.rc" ]; then
  "$build/$prog" "\$@" 2>&1 | tee "\$kept.out"
  rc=\${PIPESTATUS[0]}
  echo "\$rc" > "\$kept.rc"
  exit "\$rc"
fi
cat "\$kept.out"
exit "\$(cat "\$kept.rc")"
EOF
  chmod +x "$folder/$prog"
done
