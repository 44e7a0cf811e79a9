// One live run per --out folder (Note [One run per folder] in 05_ddp/trainer/run_lock.cpp), with
// real processes: a second run beside a live one is refused and changes nothing in the folder;
// once the first has died, the folder is taken over; also with the folder shared by two
// simulated nodes, and by a restart of the launcher.
#include <gtest/gtest.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <sstream>
#include <thread>

#include "common/launch/net.h"
#include "common/launch/rank_env.h"
#include "proc.h"

extern char** environ;

using namespace ddp_test;

namespace {

// A run that outlives its first checkpoints by far: rank 0 sleeps 50 ms before each of 2000 steps.
std::vector<std::string> long_run(const std::string& out) {
  return plus(small_run(out), {"--epochs", "100", "--max-steps", "2000", "--ckpt-every", "5", "--straggle-rank", "0", "--straggle-ms", "50"});
}

// A program started in the background, in its own process group, with the environment run_all
// gives its processes (proc.h): so that it can be stopped, looked at and killed while it runs.
class Background {
 public:
  explicit Background(const std::vector<std::string>& argv) : log_(temp_dir() + "/out.log") {
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) {
      const std::string kv = *e, name = kv.substr(0, kv.find('='));
      if (!ddp::steers_rank_resolution(name) && name != "DDP_GPU_COUNT") env.push_back(kv);
    }
    env.push_back("DDP_GPU_COUNT=0");
    const std::string prog = argv[0].find('/') == std::string::npos ? bin(argv[0]) : argv[0];
    std::vector<char*> args{const_cast<char*>(prog.c_str())}, envp;
    for (size_t k = 1; k < argv.size(); ++k) args.push_back(const_cast<char*>(argv[k].c_str()));
    args.push_back(nullptr);
    for (auto& kv : env) envp.push_back(kv.data());
    envp.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      const int fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::setpgid(0, 0);
      ::execve(prog.c_str(), args.data(), envp.data());
      ::_exit(127);
    }
    ::setpgid(pid_, pid_);  // also here: signal_all() may come before the child's own call
  }
  ~Background() {
    if (pid_ > 0) signal_all(SIGKILL), wait(10);
    std::system(("rm -rf " + log_.substr(0, log_.rfind('/'))).c_str());
  }
  // The launcher and every worker: they share its process group.
  void signal_all(int sig) { ::kill(-pid_, sig); }
  // Its wait status once it ended within `deadline_s`, else -1.
  int wait(double deadline_s) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(deadline_s);
    while (std::chrono::steady_clock::now() < until) {
      int st = 0;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) return pid_ = -1, st;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }
  std::string output() const { return read_text(log_); }

 private:
  std::string log_;
  pid_t pid_ = -1;
};

// The pid that holds the flock on <out>/run.lock, from the kernel's table of locks (/proc/locks),
// not from what the trainer wrote: rank 0 of the live run (Note [One run per folder]); -1 if none.
long rank0_pid(const std::string& out) {
  struct stat st {};
  if (::stat((out + "/run.lock").c_str(), &st) != 0) return -1;
  std::istringstream locks(read_text("/proc/locks"));
  // "1: FLOCK  ADVISORY  WRITE 4242 00:2a:1234567 0 EOF"; a waiter's line has "->" after the number
  for (std::string line; std::getline(locks, line);) {
    std::istringstream f(line);
    std::string id, type, kind, mode, pid, where;
    f >> id >> type >> kind >> mode >> pid >> where;
    if (type != "FLOCK" || where.rfind(':') == std::string::npos) continue;
    if (where.substr(where.rfind(':') + 1) == std::to_string(st.st_ino)) return std::stol(pid);
  }
  return -1;
}

// Every file and folder under `dir`: relative path -> "size mtime" (mtime in nanoseconds).
std::map<std::string, std::string> snapshot(const std::string& dir, const std::string& rel = "") {
  std::map<std::string, std::string> all;
  DIR* d = ::opendir((dir + rel).c_str());
  while (dirent* e = d ? ::readdir(d) : nullptr) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    struct stat st {};
    if (::lstat((dir + rel + "/" + name).c_str(), &st) != 0) continue;
    all[rel + "/" + name] = std::to_string(st.st_size) + " " + std::to_string(st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec);
    if (S_ISDIR(st.st_mode)) all.merge(snapshot(dir, rel + "/" + name));
  }
  if (d) ::closedir(d);
  return all;
}

std::string describe(const std::map<std::string, std::string>& files) {
  std::string s;
  for (const auto& [path, what] : files) s += "  " + path + " " + what + "\n";
  return s;
}

// Waits (at most `deadline_s`) until `out` holds a checkpoint.
bool wait_for_a_checkpoint(const std::string& out, double deadline_s) {
  for (double t = 0; t < deadline_s; t += 0.05) {
    for (const auto& [path, what] : snapshot(out + "/checkpoints")) {
      if (path.rfind("/ckpt-", 0) == 0) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

}  // namespace

// Run A trains into a folder; B (another --lr) is started on it while A lives (A stopped with
// SIGSTOP, so that the folder stands still and any change is B's): with --reset, without, and
// with --eval-only, B exits 2 naming A's rank 0 (pid and host), and the folder is exactly as it
// was: no checkpoint removed, no line in a log or metrics.jsonl. A killed, B takes the folder
// over and resumes from A's checkpoint. (Before run.lock, B's --reset removed A's checkpoints
// while A ran.)
TEST(RunFolder, ALiveRunsFolderIsRefusedAndUntouchedThenTakenOverOnceItDies) {
  const std::string dir = temp_dir(), out = dir + "/r";
  Background a(plus({"05_ddp", "--nproc-per-node", "2"}, long_run(out)));
  ASSERT_TRUE(wait_for_a_checkpoint(out, 60)) << a.output();
  const long pid = rank0_pid(out);
  ASSERT_GT(pid, 0) << a.output();
  a.signal_all(SIGSTOP);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // every process has stopped
  const auto before = snapshot(out);
  const std::string in_use = out + " is in use by another run: pid " + std::to_string(pid) + " on host " + ddp::hostname() + ", started ";
  const std::vector<std::string> b_run = plus(small_run(out), {"--max-steps", "40", "--lr", "0.05"});
  for (const std::vector<std::string>& extra : {std::vector<std::string>{"--reset"}, {}, {"--eval-only"}}) {
    const ProcResult b = trainer(2, plus(b_run, extra), 60);
    const std::string what = "B with" + (extra.empty() ? std::string(" nothing more") : " " + extra[0]) + ":\n" + b.output;
    EXPECT_EQ(b.exit_code, 2) << what;
    EXPECT_LT(b.seconds, 15) << what;
    EXPECT_NE(b.output.find(in_use), std::string::npos) << what;
    EXPECT_NE(b.output.find("; wait for it to end, stop it, or give this run its own --out"), std::string::npos) << what;
    // Rank 1 stops with rank 0: by its own exit 2 once it has the verdict, or by the launcher's
    // SIGTERM when rank 0's exit reaches the launcher first (timing decides; never a hang).
    EXPECT_TRUE(b.output.find("[rank 1/2] error on host") != std::string::npos ||
                b.output.find("signal 15 (Terminated), stopped by launcher") != std::string::npos)
        << "rank 1 stops with rank 0\n" << what;
    EXPECT_EQ(count(b.output, "--reset: removed"), 0) << what;
    const auto after = snapshot(out);
    EXPECT_EQ(after, before) << what << "\nbefore:\n" << describe(before) << "after:\n" << describe(after);
  }
  a.signal_all(SIGKILL);
  ASSERT_NE(a.wait(20), -1) << "A did not end after SIGKILL";
  const ProcResult c = trainer(2, b_run);
  EXPECT_EQ(c.exit_code, 0) << c.output;
  EXPECT_NE(c.output.find("took over " + out + " from the run of pid " + std::to_string(pid) + " on host " + ddp::hostname()),
            std::string::npos) << c.output;
  EXPECT_NE(c.output.find("resumed from " + out + "/checkpoints/ckpt-"), std::string::npos) << c.output;
  EXPECT_EQ(read_text(out + "/run.lock"), "") << "a run that ended clears its record";
  std::system(("rm -rf " + dir).c_str());
}

// The restart of 02_spawn --max-restarts: rank 0 kills itself (SIGKILL) after step 13, so its
// record stays in run.lock; the launcher restarts both ranks, and the new rank 0 takes the folder
// over from the dead one and finishes.
TEST(RunFolder, ARestartedRankZeroTakesOverTheFolderOfTheAttemptThatDied) {
  const std::string dir = temp_dir(), out = dir + "/r";
  const ProcResult r = trainer(2, plus(small_run(out), {"--max-steps", "20", "--ckpt-every", "5", "--max-restarts", "1",
                                                        "--kill-rank", "0", "--kill-at-step", "13"}));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("attempt 1 failed"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[rank 0/2] took over " + out + " from the run of pid "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("resumed from " + out + "/checkpoints/ckpt-000000010.pt at step 10"), std::string::npos) << r.output;
  std::system(("rm -rf " + dir).c_str());
}

// Two simulated nodes (own network and host name each: Note [Nodes as hosts]) write into one
// folder, as nodes do on a shared file system: rank 1 on node1 writes its rank1.log beside rank
// 0's and is not refused by its own run. A second such run is refused naming node0 and A's rank 0;
// once A is killed it runs to the end.
TEST(RunFolder, TwoSimulatedNodesShareOneRunsFolderAndASecondRunWaitsForTheFirstToEnd) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: --link puts each node in network namespaces of its own";
  const std::string dir = temp_dir(), out = dir + "/r";
  const std::vector<std::string> nodes = {"02_spawn", "--nnodes", "2", "--nproc-per-node", "1", "--link", "1gbit", "--timeout", "30", "--"};
  Background a(plus(nodes, plus({bin("05_ddp")}, long_run(out))));
  ASSERT_TRUE(wait_for_a_checkpoint(out, 90)) << a.output();
  const long pid = rank0_pid(out);
  ASSERT_GT(pid, 0) << a.output();
  EXPECT_NE(read_text(out + "/rank1.log").find("[rank 1/2]"), std::string::npos) << "rank 1 of A writes into the folder too";
  const std::vector<std::string> b_run = plus(small_run(out), {"--max-steps", "40", "--lr", "0.05"});
  const ProcResult b = run_one({plus(nodes, plus({bin("05_ddp")}, b_run))}, 90);
  EXPECT_EQ(b.exit_code, 2) << b.output;
  EXPECT_NE(b.output.find(out + " is in use by another run: pid " + std::to_string(pid) + " on host node0, started "), std::string::npos)
      << b.output;
  const std::string a_so_far = a.output();
  EXPECT_EQ(count(a_so_far, "in use by another run") + count(a_so_far, "could not claim"), 0) << a_so_far;
  a.signal_all(SIGKILL);
  ASSERT_NE(a.wait(30), -1) << "A did not end after SIGKILL";
  const ProcResult c = run_one({plus(nodes, plus({bin("05_ddp")}, b_run))}, 120);
  EXPECT_EQ(c.exit_code, 0) << c.output;
  EXPECT_NE(c.output.find("took over " + out + " from the run of pid " + std::to_string(pid) + " on host node0"), std::string::npos)
      << c.output;
  std::system(("rm -rf " + dir).c_str());
}
