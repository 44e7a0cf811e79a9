// provides: the rank-prefixed console logger.
#include "common/log.h"

#include <unistd.h>

#include <cstdio>

#include "common/net.h"

namespace ddp {
namespace {
std::string g_tag = "rank ?/?";
int g_rank = -1;

void write_line(int fd, const std::string& line) {
  // One write() per line: the kernel does not interleave it with other processes' writes
  // to the same pipe or terminal (lines are far below PIPE_BUF).
  std::string s = line + "\n";
  std::fflush(stdout);
  ssize_t off = 0;
  while (off < static_cast<ssize_t>(s.size())) {
    ssize_t n = ::write(fd, s.data() + off, s.size() - off);
    if (n <= 0) return;
    off += n;
  }
}
}  // namespace

void set_log_identity(int rank, int world_size) {
  g_rank = rank;
  g_tag = "rank " + std::to_string(rank) + "/" + std::to_string(world_size);
}
void set_log_identity(const std::string& tag) {
  g_rank = -1;
  g_tag = tag;
}

void log(const std::string& msg) { write_line(STDOUT_FILENO, "[" + g_tag + "] " + msg); }

void log0(const std::string& msg) {
  if (g_rank <= 0) log(msg);
}

void log_error(const std::string& msg) {
  write_line(STDERR_FILENO, "[" + g_tag + "] error on host " + hostname() + " (pid " +
                                std::to_string(::getpid()) + "): " + msg);
}

}  // namespace ddp

namespace ddp {
std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3g", s);
  return std::string(buf) + "s";
}
}  // namespace ddp
