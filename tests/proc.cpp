// provides: the process runner of the multi-process tests.
#include "proc.h"

#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "common/launch/command.h"
#include "common/launch/error_file.h"
#include "common/launch/net.h"
#include "common/launch/rank_env.h"

extern char** environ;

namespace ddp_test {
namespace {

// Note [Idle BLAS threads]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// OpenBLAS (the cpu flavour's BLAS) starts a thread per core when a process loads it, and each
// spins on sched_yield() for 2^28 cycles (about 0.1 s) before it sleeps, although every program
// here computes on one intra-op thread and never gives them work. The tests start some 1,400
// such processes. OPENBLAS_THREAD_TIMEOUT=4 (2^4 cycles) puts them to sleep at once; it changes
// no result, only how long an idle thread spins. Measured on idle cores, one rank of a one-step
// `05_ddp` run: 0.14-0.19 s of system time, 0.06-0.08 s with it; under the suite's load, where
// sched_yield() gives the core to another process, too little to show in the totals. Set before
// main(), unless already set: every process the tests start inherits it.
const bool kIdleThreadsSleep = [] { return ::setenv("OPENBLAS_THREAD_TIMEOUT", "4", /*overwrite=*/0) == 0; }();

}  // namespace

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> plus(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::set<std::string> fingerprints(const std::string& output) {
  std::set<std::string> prints;
  const std::regex pattern("params fingerprint ([0-9a-f]{16})");
  for (auto it = std::sregex_iterator(output.begin(), output.end(), pattern); it != std::sregex_iterator(); ++it) {
    prints.insert((*it)[1]);
  }
  return prints;
}

std::string bin(const std::string& name) { return std::string(DDP_BIN_DIR) + "/" + name; }

int free_port() { return ddp::find_free_port("127.0.0.1"); }

int write_to_a_gone_peer() {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) throw std::runtime_error(std::string("socketpair: ") + std::strerror(errno));
  ::close(fds[1]);  // the peer is gone
  const char byte = 'x';
  errno = 0;
  const int err = ::write(fds[0], &byte, 1) == -1 ? errno : 0;
  ::close(fds[0]);
  return err;
}

// Note [The tests' scratch folders]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A test's runs write logs, metrics and checkpoints into folders of temp_dir(); most tests never
// removed them, and a full run left some fifty in /tmp (megabytes each with checkpoints). Each
// test process now makes its folders inside one of its own, /tmp/ddp_test_XXXXXX, removed once
// its tests end; kept and named when one of them failed (or keep_scratch_folders() was called,
// as the walk does for DDP_WALK_KEEP=1), for a look. A process that a test left running and that
// still writes there makes the removal leave what it wrote: errors are ignored.
namespace {
std::string scratch_root;
bool keep_scratch = false;

class ScratchFolders : public ::testing::Environment {
 public:
  void TearDown() override {
    if (scratch_root.empty()) return;
    if (keep_scratch || ::testing::UnitTest::GetInstance()->failed_test_count() > 0) {
      std::cout << "[scratch] this process's folders are kept for a look: " << scratch_root << "\n";
      return;
    }
    // nftw, not std::filesystem::remove_all: the pip wheel's libtorch.so exports copies of
    // std::filesystem's functions of its own, which ddp_unit_tests (linked to it) calls instead
    // of libstdc++'s, and its remove_all crashed there (a null function pointer).
    ::nftw(scratch_root.c_str(), [](const char* path, const struct stat*, int, FTW*) { return ::remove(path), 0; }, 16,
           FTW_DEPTH | FTW_PHYS);
  }
};
::testing::Environment* const kScratchFolders = ::testing::AddGlobalTestEnvironment(new ScratchFolders);
}  // namespace

std::string temp_dir() {
  if (scratch_root.empty()) {
    char root[] = "/tmp/ddp_test_XXXXXX";
    if (!::mkdtemp(root)) throw std::runtime_error("mkdtemp failed");
    scratch_root = root;
  }
  std::string dir = scratch_root + "/XXXXXX";
  if (!::mkdtemp(dir.data())) throw std::runtime_error("mkdtemp failed in " + scratch_root);
  return dir;
}

void keep_scratch_folders() { keep_scratch = true; }

int count(const std::string& hay, const std::string& needle) {
  int n = 0;
  for (size_t pos = hay.find(needle); pos != std::string::npos; pos = hay.find(needle, pos + 1)) ++n;
  return n;
}

std::vector<ProcResult> run_all(const std::vector<ProcSpec>& specs, double deadline_s) {
  const std::string dir = temp_dir();
  std::vector<ProcResult> results(specs.size());
  std::vector<pid_t> pids(specs.size(), -1);
  std::vector<double> started(specs.size(), 0);
  std::vector<bool> signalled(specs.size(), false);
  const double t0 = ddp::monotonic_seconds();
  size_t next = 0;
  size_t running = 0;
  auto launch = [&](size_t i) {
    const ProcSpec& s = specs[i];
    std::vector<std::string> env_strs;
    for (char** e = environ; *e; ++e) {
      std::string kv = *e;
      const std::string name = kv.substr(0, kv.find('='));
      // spec.env replaces a variable of ours: the first of two equal names is the one read.
      if (!ddp::steers_rank_resolution(name) && name != "DDP_GPU_COUNT" && !s.env.count(name)) env_strs.push_back(kv);
    }
    // The tests are of CPU behaviour unless they say otherwise: on a GPU host the default
    // backend would be NCCL (Note [Choosing the backend]); zero GPUs pins Gloo on the CPU.
    if (!s.env.count("DDP_GPU_COUNT") && !s.real_gpus) env_strs.push_back("DDP_GPU_COUNT=0");
    for (const auto& [k, v] : s.env) env_strs.push_back(k + "=" + v);
    const std::string out = dir + "/" + std::to_string(i) + ".log";
    pid_t pid = ::fork();
    if (pid == 0) {
      int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::setpgid(0, 0);  // its own process group: a stuck launcher and its workers die together
      std::vector<char*> argv, envp;
      std::string prog = s.argv[0].find('/') == std::string::npos ? bin(s.argv[0]) : s.argv[0];
      argv.push_back(prog.data());
      for (size_t k = 1; k < s.argv.size(); ++k) argv.push_back(const_cast<char*>(s.argv[k].c_str()));
      argv.push_back(nullptr);
      for (auto& kv : env_strs) envp.push_back(kv.data());
      envp.push_back(nullptr);
      ::execve(prog.c_str(), argv.data(), envp.data());
      std::fprintf(stderr, "exec %s: %s\n", prog.c_str(), std::strerror(errno));
      ::_exit(127);
    }
    pids[i] = pid;
    started[i] = ddp::monotonic_seconds();
    ++running;
  };
  while (next < specs.size() || running > 0) {
    const double t = ddp::monotonic_seconds() - t0;
    while (next < specs.size() && specs[next].start_delay_s <= t) launch(next++);
    for (size_t i = 0; i < specs.size(); ++i) {
      if (pids[i] <= 0) continue;
      // A signal that must find the process ready (its handlers in place) waits for the line
      // that says so: on a loaded machine a fixed delay can come before LibTorch has loaded.
      if (specs[i].signal && !signalled[i] && ddp::monotonic_seconds() - started[i] >= specs[i].signal_after_s &&
          (specs[i].signal_once_printed.empty() ||
           read_text(dir + "/" + std::to_string(i) + ".log").find(specs[i].signal_once_printed) != std::string::npos)) {
        ::kill(pids[i], specs[i].signal);
        signalled[i] = true;
      }
      int st = 0;
      if (::waitpid(pids[i], &st, WNOHANG) == pids[i]) {
        results[i].seconds = ddp::monotonic_seconds() - started[i];
        if (WIFEXITED(st)) results[i].exit_code = WEXITSTATUS(st);
        if (WIFSIGNALED(st)) results[i].term_signal = WTERMSIG(st);
        pids[i] = -1;
        --running;
      }
    }
    if (t > deadline_s) {
      for (size_t i = 0; i < specs.size(); ++i) {
        if (pids[i] <= 0) continue;
        ::kill(-pids[i], SIGKILL);
        ::kill(pids[i], SIGKILL);
        int st = 0;
        ::waitpid(pids[i], &st, 0);
        results[i].timed_out = true;
        results[i].seconds = ddp::monotonic_seconds() - started[i];
        pids[i] = -1;
        --running;
      }
      next = specs.size();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (size_t i = 0; i < specs.size(); ++i) results[i].output = read_text(dir + "/" + std::to_string(i) + ".log");
  std::system(("rm -rf " + dir).c_str());
  return results;
}

bool gpu_host() { return gpu_count() > 0; }

int gpu_count() {
  int n = 0;
  while (::access(("/dev/nvidia" + std::to_string(n)).c_str(), F_OK) == 0) ++n;
  return n;
}

ProcResult run_one(const ProcSpec& spec, double deadline_s) { return run_all({spec}, deadline_s)[0]; }

std::string slurm_skip_reason() {
  if (const char* why = std::getenv("DDP_SLURM_UNAVAILABLE")) return std::string("no local Slurm: ") + why;
  if (!std::getenv("SLURM_CONF")) return "no Slurm: SLURM_CONF is not set (scripts/test.sh starts one as root with scripts/local_slurm.sh)";
  auto r = ddp::run_command({"sinfo", "-h", "-N", "-o", "%N %T"}, 20);
  if (r.exit_code != 0) return "no Slurm answers (sinfo: " + r.output + ")";
  if (count(r.output, "idle") + count(r.output, "mix") + count(r.output, "alloc") < 2) {
    return "the local Slurm has fewer than 2 nodes up: " + r.output;
  }
  return "";
}

std::vector<std::string> small_run(const std::string& out) {
  return {"--train-samples", "2048", "--test-samples", "1001", "--batch-size", "32", "--warmup-steps", "5",
          "--log-every", "10", "--timeout", "20", "--out", out};
}

namespace {
ProcResult chapter_run(const std::string& program, int world, const std::vector<std::string>& args, double deadline_s,
                       const std::map<std::string, std::string>& env) {
  ProcSpec s{{program, "--nproc-per-node", std::to_string(world)}, env};
  s.argv.insert(s.argv.end(), args.begin(), args.end());
  return run_one(s, deadline_s);
}
}  // namespace

ProcResult trainer(int world, const std::vector<std::string>& args, double deadline_s,
                   const std::map<std::string, std::string>& env) {
  return chapter_run("05_ddp", world, args, deadline_s, env);
}

ProcResult fsdp_trainer(int world, const std::vector<std::string>& args, double deadline_s,
                        const std::map<std::string, std::string>& env) {
  return chapter_run("07_fsdp", world, args, deadline_s, env);
}

}  // namespace ddp_test
