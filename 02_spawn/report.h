// defines: Worker, what 02_spawn knows of each worker, and report(): step 6, the root-cause
// table of who failed first and why. See Note [The root-cause table].
#pragma once
#include <sys/types.h>
#include <sys/wait.h>

#include <string>
#include <vector>

#include "02_spawn/restarts.h"
#include "common/basics/errors.h"

namespace spawn {

struct Worker {
  int rank = 0, node = 0, local = 0;
  int attempt = 0;         // 0, then 1, 2, ... after each restart (TORCHELASTIC_RESTART_COUNT)
  pid_t pid = -1;
  int port_fd = -1;        // the launcher's end of the pipe that carries the store's port
  std::string error_file;  // where the worker writes why it failed (TORCHELASTIC_ERROR_FILE)
  bool done = false, stopped_by_launcher = false;
  int status = 0;          // from waitpid()
  double when = 0;         // when it ended (monotonic seconds)
  // Exit 75: stopped on a preemption signal after a checkpoint; not a failure. Preemption is
  // chapter 06's lesson (05_ddp's trainer does it under Slurm): the launcher only passes it on.
  bool preempted() const { return done && WIFEXITED(status) && WEXITSTATUS(status) == ddp::kExitPreempted; }
  bool failed() const { return done && !(WIFEXITED(status) && WEXITSTATUS(status) == 0) && !preempted(); }
};

// "exit 3", "signal 9 (Killed)", "signal 15 (Terminated), stopped by launcher".
std::string describe_status(const Worker& w);

// Step 6: reads each worker's error file (in `error_dir`, then removed), prints the outcome (all
// passed, preempted, or the table with the first failure marked) and returns the attempt's exit
// code. `t0`: when the attempt started; `stop_signal`: a SIGINT/SIGTERM the launcher received
// and passed on (0: none); `store_ok`: false when the launcher could not host the store.
Outcome report(std::vector<Worker>& workers, const std::string& error_dir, double t0, int stop_signal, bool store_ok);

}  // namespace spawn
