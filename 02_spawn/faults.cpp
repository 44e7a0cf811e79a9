// provides: the faults 02_spawn injects on purpose (--fail-rank, --fail-mode, --straggle-ms).
#include "02_spawn/faults.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "common/basics/log.h"
#include "common/group/process_group.h"
#include "common/launch/error_file.h"

namespace spawn {

// Note [Faults on purpose]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// A launcher is judged by what it does when a worker fails, so 02_spawn can make one fail, in
// the four ways workers fail on a cluster, right after it joined the group:
//   exit      an error the worker caught: it writes its cause to its error file and exits 3;
//   kill      SIGKILL, as a segfault or the OOM killer: no cause written, the signal is the cause;
//   hang      alive but never joining the all-reduce (a deadlock, a stuck data loader): the
//             others time out after --timeout and their flight recorders name the rank behind;
//   straggle  late to the all-reduce by --straggle-ms, then on time again: with a --timeout
//             shorter than that, the others give up first.
// The fault fires in the first attempt only (TORCHELASTIC_RESTART_COUNT 0), so that with
// --max-restarts the next attempt passes: a failure, a restart and a success in one run. It
// fires once every rank has joined: each rank checks in through the store after it joined, and
// the failing one waits for all of them (at most --timeout). A rank that died while another was
// still connecting its Gloo pairs would fail that one's group instead ("Gloo could not connect all
// ranks although all checked in"), before its flight recorder could name it.

void add_fault_flags(CLI::App& app, Fault& fault) {
  app.add_option("--fail-rank", fault.rank, "Make this rank fail on purpose after joining");
  app.add_option("--fail-mode", fault.mode,
                 "How --fail-rank fails: exit (code 3), kill (SIGKILL), hang (skips the all-reduce), straggle (late by --straggle-ms)")
      ->check(CLI::IsMember({"exit", "kill", "hang", "straggle"}));
  app.add_option("--straggle-ms", fault.straggle_ms, "How late --fail-mode straggle comes to the all-reduce")
      ->check(CLI::PositiveNumber);
}

std::optional<int> inject_fault(const Fault& fault, ddp::Group& g, int attempt) {
  if (!fault.rank || attempt != 0) return std::nullopt;
  const int rank = g.rank();
  const std::string joined = "fault/joined/";
  g.store->set(joined + std::to_string(rank), std::vector<uint8_t>{1});
  if (fault.rank != rank) return std::nullopt;
  std::vector<std::string> everyone;
  for (int r = 0; r < g.size(); ++r) everyone.push_back(joined + std::to_string(r));
  try {
    g.store->wait(everyone, g.info.timeout());
  } catch (const std::exception&) {
    // A rank that never joined: the fault fires anyway, and its peers' timeouts tell that story.
  }
  ddp::log("injecting fault: --fail-mode " + fault.mode);
  if (fault.mode == "exit") {
    ddp::write_error_file("injected fault: exit code 3 (--fail-rank " + std::to_string(rank) + " --fail-mode exit)");
    return 3;
  }
  if (fault.mode == "kill") ::raise(SIGKILL);  // dies at once, like a segfault or the OOM killer
  if (fault.mode == "straggle") {              // late to the all-reduce by --straggle-ms
    std::this_thread::sleep_for(std::chrono::milliseconds(fault.straggle_ms));
    return std::nullopt;
  }
  while (true) ::pause();  // "hang": alive, but never joins the all-reduce
}

}  // namespace spawn
