// provides: run_command() with a deadline, for scontrol, sbatch and squeue.
#include "common/launch/command.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/launch/error_file.h"

extern char** environ;

namespace ddp {

std::string command_line(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) s += (s.empty() ? "" : " ") + a;
  return s;
}

CommandResult run_command(const std::vector<std::string>& argv, double timeout_s) {
  CommandResult r;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    r.started = false;
    r.output = "pipe failed";
    return r;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int err = ::posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (err != 0) {
    ::close(fds[0]);
    r.started = false;
    r.output = argv[0] + ": " + std::strerror(err);
    return r;
  }
  const double deadline = monotonic_seconds() + timeout_s;
  char buf[4096];
  for (bool open = true; open;) {
    const double left = deadline - monotonic_seconds();
    if (left <= 0) {
      r.timed_out = true;
      ::kill(pid, SIGKILL);
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left * 1000) + 1) <= 0) continue;
    const ssize_t n = ::read(fds[0], buf, sizeof(buf));
    if (n > 0) r.output.append(buf, n);
    open = n > 0 || (n < 0 && errno == EINTR);
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!r.timed_out && WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  return r;
}

}  // namespace ddp
