// provides: the rank-prefixed console logger.
#include "common/basics/log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "common/launch/net.h"
#include "common/observe/trace.h"

namespace ddp {
namespace {
std::string g_tag = "rank ?/?";
int g_rank = -1;
int g_file = -1;

void write_all(int fd, const std::string& s) {
  ssize_t off = 0;
  while (off < static_cast<ssize_t>(s.size())) {
    ssize_t n = ::write(fd, s.data() + off, s.size() - off);
    if (n <= 0) return;
    off += n;
  }
}

// DDP_TRACE_LOG_LINES=1 (read before main(), as the program started): with --trace, each line
// this rank logs is also an instant named "log" on its compute track, at the moment it was
// logged, its text in args.line. Exercise 04.1's check reads when each hook logged, against when
// its all-reduce started; a line printed at another moment shows there.
const bool kTraceLines = [] {
  const char* v = std::getenv("DDP_TRACE_LOG_LINES");
  return v && std::string(v) == "1";
}();
void on_trace(const std::string& msg) {
  if (kTraceLines && trace().on()) trace().instant("log", "log", wall_us(), Trace::kCompute, {{"line", msg}});
}

void write_line(int fd, const std::string& line) {
  // One write() per line: the kernel does not interleave it with other processes' writes
  // to the same pipe or terminal (lines are far below PIPE_BUF).
  std::string s = line + "\n";
  std::fflush(stdout);
  write_all(fd, s);
  if (g_file >= 0) write_all(g_file, s);
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
void set_log_identity(const std::string& tag, bool prints_log0) {
  g_rank = prints_log0 ? -1 : 1;
  g_tag = tag;
}

void set_log_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot open the log file " + path + ": " + std::strerror(errno));
  if (g_file >= 0) ::close(g_file);
  g_file = fd;
}

void log(const std::string& msg) {
  on_trace(msg);
  write_line(STDOUT_FILENO, "[" + g_tag + "] " + msg);
}

void log0(const std::string& msg) {
  if (g_rank <= 0) {
    log(msg);
  } else if (g_file >= 0) {
    on_trace(msg);
    write_all(g_file, "[" + g_tag + "] " + msg + "\n");  // rank 0 prints it; every rank's file keeps it
  }
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
