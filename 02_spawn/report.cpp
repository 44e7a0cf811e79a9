// provides: 02_spawn's report of an attempt: all passed, preempted, or the root-cause table.
#include "02_spawn/report.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "common/basics/log.h"
#include "common/launch/error_file.h"

namespace spawn {

// Note [The root-cause table]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Each failed worker left its cause in its error file (TORCHELASTIC_ERROR_FILE, torchrun's
// convention: common/launch/error_file.cpp); a worker that died by a signal could not. The first
// failure is the earliest time a worker recorded or was reaped; workers the launcher stopped
// itself (SIGTERM or SIGKILL from step 5) are consequences, not causes, and are not counted.
// The table has a row per rank: node, local rank, pid, time since the start, exit code or
// signal, and the cause, of any length (a flight recorder's are long). The launcher exits with
// the first failure's exit code, 128 + N for a signal N as a shell does, so that a script or a
// scheduler above it sees what went wrong.

std::string describe_status(const Worker& w) {
  if (WIFEXITED(w.status)) return "exit " + std::to_string(WEXITSTATUS(w.status));
  const int sig = WTERMSIG(w.status);
  std::string s = "signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
  if (w.stopped_by_launcher && (sig == SIGTERM || sig == SIGKILL)) s += ", stopped by launcher";
  return s;
}

Outcome report(std::vector<Worker>& workers, const std::string& error_dir, double t0, int stop_signal, bool store_ok) {
  const int world = static_cast<int>(workers.size());
  std::vector<std::string> causes(world, "-");
  for (Worker& w : workers) {
    if (auto rec = ddp::read_error_file(w.error_file)) {
      causes[w.rank] = rec->message;
      if (rec->monotonic_s > 0) w.when = std::min(w.when, rec->monotonic_s);
    }
    for (const char* end : {"", ".tmp"}) std::remove((w.error_file + end).c_str());  // .tmp: a worker killed mid-write
  }
  ::rmdir(error_dir.c_str());
  const Worker* first = nullptr;
  int n_failed = 0;
  for (Worker& w : workers) {
    const bool own_failure = w.failed() && !(WIFSIGNALED(w.status) && w.stopped_by_launcher &&
                                             (WTERMSIG(w.status) == SIGTERM || WTERMSIG(w.status) == SIGKILL));
    if (!own_failure) continue;
    ++n_failed;
    if (!first || w.when < first->when) first = &w;
  }
  const bool all_ok = std::none_of(workers.begin(), workers.end(), [](const Worker& w) { return w.failed(); });
  if (all_ok && std::any_of(workers.begin(), workers.end(), [](const Worker& w) { return w.preempted(); })) {
    ddp::log("the workers stopped for preemption (exit 75) after writing a checkpoint: run again to resume");
    return {ddp::kExitPreempted, true};
  }
  if (all_ok) {
    ddp::log("all " + std::to_string(world) + " workers exited 0 in " + ddp::seconds(ddp::monotonic_seconds() - t0));
    return {store_ok ? ddp::kExitOk : ddp::kExitFailure, !store_ok};
  }
  std::string table = first ? std::to_string(n_failed) + " of " + std::to_string(world) +
                                  " workers failed; first: rank " + std::to_string(first->rank)
                            : std::string("the run was stopped: the launcher received ") + strsignal(stop_signal);
  table += "\n  rank  node  local  pid      +time    result                                        cause\n";
  for (const Worker& w : workers) {
    char line[160];
    std::snprintf(line, sizeof(line), "  %-4d%s %-5d %-6d %-8d %-8s %-45s ", w.rank, &w == first ? "*" : " ", w.node,
                  w.local, w.pid, ddp::seconds(w.when - t0).c_str(), describe_status(w).c_str());
    table += line + causes[w.rank] + "\n";  // a cause of any length (the flight recorder's are long)
  }
  ddp::log_error(table + "  (* = first failure; +time since start)");
  if (!first) return {128 + stop_signal, true};
  if (WIFEXITED(first->status)) return {WEXITSTATUS(first->status), false};
  return {128 + WTERMSIG(first->status), false};  // the shell's convention for "killed by signal N"
}

}  // namespace spawn
