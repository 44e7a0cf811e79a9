#!/usr/bin/env bash
# defines: handout_commit ROOT: the first commit of a student's copy (scripts/exercise.sh
# --handout), printed, when ROOT is the top of such a git repository; fails otherwise (a clone of
# the course, a folder without git). Sourced by scripts/exercise.sh and exercises/checks/lib.sh.
handout_commit() {
  local first
  [ "$(git -C "$1" rev-parse --show-toplevel 2>/dev/null)" = "$(cd "$1" && pwd -P)" ] || return 1
  first=$(git -C "$1" rev-list --max-parents=0 HEAD 2>/dev/null | tail -n 1) || return 1
  [[ $(git -C "$1" log -1 --format=%s "$first" 2>/dev/null) == "The course as handed out"* ]] && echo "$first"
}
