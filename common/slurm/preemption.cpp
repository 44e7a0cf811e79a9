// provides: the preemption flag and its signal handler, the drill, and `scontrol requeue`.
#include "common/slurm/preemption.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "common/launch/command.h"
#include "common/basics/errors.h"

namespace ddp {
namespace {

std::atomic<int> g_received{0};  // lock-free: the one thing a handler may touch

void on_signal(int sig) { g_received.store(sig); }

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

void watch_for_preemption(int sig) {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // system calls in flight (a socket read in Gloo) carry on
  ::sigaction(sig, &sa, nullptr);
}

int listen_for_preemption(const std::string& signal) {
  const int sig = parse_signal(signal);
  watch_for_preemption(sig);  // the handler only sets a flag
  return sig;
}

int preemption_signal() { return g_received.load(); }

void drill_preemption(int sig, double after_s) {
  std::thread([sig, after_s] {
    std::this_thread::sleep_for(std::chrono::duration<double>(after_s));
    ::kill(::getpid(), sig);
  }).detach();
}

void requeue_slurm_job(const std::string& job_id, double timeout_s) {
  const std::vector<std::string> cmd{"scontrol", "requeue", job_id};
  const CommandResult r = run_command(cmd, timeout_s);
  if (r.exit_code == 0) return;
  std::string why = !r.started ? "scontrol is not on PATH" : r.timed_out ? "no answer within " + std::to_string(timeout_s) + " s"
                                                                          : "exit " + std::to_string(r.exit_code);
  throw std::runtime_error("'" + command_line(cmd) + "' failed (" + why + "): " + r.output +
                           " The checkpoint is written: submit the job again to resume from it");
}

}  // namespace ddp
