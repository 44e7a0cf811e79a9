// provides: the scheduler's signals by name.
#include "common/slurm/signals.h"

#include <signal.h>

#include <utility>

#include "common/basics/errors.h"

namespace ddp {
namespace {

const std::pair<const char*, int> kSignals[] = {
    {"SIGUSR1", SIGUSR1}, {"SIGUSR2", SIGUSR2}, {"SIGTERM", SIGTERM}, {"SIGINT", SIGINT}, {"SIGHUP", SIGHUP}};

}  // namespace

int parse_signal(const std::string& name) {
  for (const auto& [n, sig] : kSignals) {
    if (name == n || name == n + 3 || name == std::to_string(sig)) return sig;
  }
  throw UsageError("unknown preemption signal '" + name + "': use USR1, USR2, TERM, INT or HUP (a name or its number)");
}

std::string signal_name(int sig) {
  for (const auto& [n, s] : kSignals) {
    if (s == sig) return n;
  }
  return "signal " + std::to_string(sig);
}

}  // namespace ddp
