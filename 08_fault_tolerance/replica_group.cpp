// provides: fork_ranks(), inner_group(), ask_together() and agree() (Note [A replica group of several ranks]).
#include "08_fault_tolerance/replica_group.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "common/basics/errors.h"
#include "common/basics/log.h"
#include "common/launch/net.h"

namespace ch08 {
namespace {

// The file of a replica group's own store: in the run's folder, named for the process that forked
// the ranks (a replacement's is another).
std::string store_path(const Options& o, pid_t forker) {
  return o.out + "/.ranks." + o.replica_id + "." + std::to_string(forker);
}

}  // namespace

int fork_ranks(const Options& o) {
  const int n = o.ranks_per_replica;
  if (n <= 1) return 0;
  std::error_code ec;
  std::filesystem::create_directories(o.out, ec);
  std::vector<pid_t> ranks;
  for (int k = 0; k < n; ++k) {
    std::fflush(nullptr);  // nothing buffered twice
    const pid_t pid = fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // the group's forker gone (killed as a lost replica): every rank with it
      if (getppid() == 1) _exit(1);      // it was gone before the line above
      return k;
    }
    ranks.push_back(pid);
  }
  ddp::set_log_identity("replica " + o.replica_id);
  // The forker: waits for the ranks; the first that fails ends the group (the others' collectives
  // could not finish without it).
  int code = ddp::kExitOk;
  bool lost = false;
  for (size_t left = ranks.size(); left > 0; --left) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0) break;
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (ok || lost || code != ddp::kExitOk) continue;
    const int k = static_cast<int>(std::find(ranks.begin(), ranks.end(), pid) - ranks.begin());
    if (WIFEXITED(status) && WEXITSTATUS(status) == ddp::kExitUsage) {
      code = ddp::kExitUsage;  // bad input: said by the rank; not a lost replica
    } else {
      lost = true;
      ddp::log("its rank " + o.replica_id + "." + std::to_string(k) + " " +
               (WIFSIGNALED(status) ? std::string("was killed (") + strsignal(WTERMSIG(status)) + ")"
                                    : "exited with code " + std::to_string(WEXITSTATUS(status))) +
               ": the whole replica is lost");
    }
    for (pid_t other : ranks) if (other != pid) kill(other, SIGKILL);
  }
  std::filesystem::remove(store_path(o, getpid()), ec);
  std::fflush(nullptr);
  if (lost) {  // ended as a killed replica, for whoever started it (the launcher, srun)
    signal(SIGKILL, SIG_DFL);
    raise(SIGKILL);
  }
  std::exit(code);
}

ddp::Group inner_group(const Options& o, int local_rank) {
  const int n = o.ranks_per_replica;
  c10::intrusive_ptr<c10d::Store> store;
  if (n <= 1) {
    store = c10::make_intrusive<c10d::HashStore>();
  } else {
    store = c10::make_intrusive<c10d::FileStore>(store_path(o, getppid()), n);
  }
  // Its leader may wait for a quorum up to --quorum-deadline before it writes the answer.
  store->setTimeout(std::chrono::milliseconds(static_cast<int64_t>((o.quorum_deadline_s + 30) * 1000)));
  ddp::RankInfo info;
  info.rank.value = local_rank, info.world_size.value = n;
  info.local_rank.value = local_rank, info.local_world_size.value = n;
  info.backend.value = "gloo", info.timeout_s.value = o.timeout_s;
  // One host, its ranks: over its loopback device.
  return ddp::Group(info, store, new_group(c10::make_intrusive<c10d::PrefixStore>("gloo", store), local_rank, n, "127.0.0.1", o.timeout_s));
}

Quorum ask_together(ddp::Group& inner, LighthouseClient& lighthouse, int64_t step, int64_t failures, double deadline_s) {
  if (inner.size() == 1) return lighthouse.ask(step, failures, deadline_s);
  static int64_t asks = 0;  // every rank asks as often: they act on agreed answers only
  const std::string key = "quorum/" + std::to_string(++asks);
  if (inner.rank() == 0) {
    std::string answer;
    try {
      const Quorum q = lighthouse.ask(step, failures, deadline_s);
      answer = lighthouse.epoch() + "\n" + serialize(q);
      inner.store->set(key, std::vector<uint8_t>(answer.begin(), answer.end()));
      return q;
    } catch (const RunEnded& e) {
      answer = "ended " + std::to_string(e.step);
      inner.store->set(key, std::vector<uint8_t>(answer.begin(), answer.end()));
      throw;
    }
  }
  const std::vector<uint8_t> bytes = inner.store->get(key);
  const std::string answer(bytes.begin(), bytes.end());
  if (answer.rfind("ended ", 0) == 0) throw RunEnded(std::stoll(answer.substr(6)));
  const size_t line = answer.find('\n');
  lighthouse.follow(answer.substr(0, line));
  return parse_quorum(answer.substr(line + 1));
}

bool agree(ddp::Group& inner, bool ok) {
  if (inner.size() == 1) return ok;
  std::vector<torch::Tensor> flag{torch::full({1}, ok ? 1 : 0, torch::kInt)};
  c10d::AllreduceOptions min;
  min.reduceOp = c10d::ReduceOp::MIN;
  inner.pg->allreduce(flag, min)->wait();  // throws if a rank of the group is gone: this one ends too
  return flag[0].item<int>() == 1;
}

c10::intrusive_ptr<ddp::Backend> new_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                           const std::string& host, double timeout_s) {
  // A replica lost mid-collective closes its sockets; a survivor's next write to one raises
  // SIGPIPE, whose default ends the process in silence. Ignored, as every rank of 01-07 does
  // (Note [A peer gone mid-write] in common/group/process_group.cpp): the write fails, Gloo
  // throws, and the step fails as a step with a lost peer does.
  signal(SIGPIPE, SIG_IGN);
  auto opts = c10d::ProcessGroupGloo::Options::create(std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME")) {
    opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
  } else if (ddp::is_loopback(host)) {
    opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  } else {
    opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  }
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, opts);
}

}  // namespace ch08
