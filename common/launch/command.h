// defines: run_command(): another program run to its end, or stopped at a deadline, with its output.
#pragma once
#include <string>
#include <vector>

namespace ddp {

struct CommandResult {
  int exit_code = -1;    // -1: it did not exit by itself (killed at the deadline, or by a signal)
  bool timed_out = false;
  bool started = true;   // false: no such program on PATH
  std::string output;    // stdout and stderr together
};

// Runs argv[0] (searched on PATH) with argv, waits at most `timeout_s`, then SIGKILLs it.
// posix_spawn, not fork: safe in a process where LibTorch or Gloo already run threads.
CommandResult run_command(const std::vector<std::string>& argv, double timeout_s);

// "scontrol requeue 42": the words joined, for messages.
std::string command_line(const std::vector<std::string>& argv);

}  // namespace ddp
