// provides: launch(): a lighthouse and N replicas on this machine, faults on purpose, the run checked.
#include "08_fault_tolerance/launch.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "common/basics/errors.h"
#include "common/basics/failure.h"
#include "common/basics/log.h"
#include "common/hosts/simulated_hosts.h"
#include "common/launch/error_file.h"
#include "common/launch/net.h"

namespace ch08 {
namespace {

volatile sig_atomic_t interrupted = 0;

struct Child {
  std::string id;
  pid_t pid = -1;
  bool replacement = false, running = true, lost = false, stopped = false;
};

std::string num(double v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}

// `hosts` (--link): the child becomes a process of host `node` first (Note [Nodes as hosts]).
pid_t start(const std::vector<std::string>& args, const ddp::SimulatedHosts* hosts = nullptr, int node = 0) {
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // a launcher that dies takes its children with it
    if (hosts && !hosts->enter(node)) _exit(127);
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv("/proc/self/exe", argv.data());
    _exit(127);
  }
  return pid;
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

std::vector<torch::Tensor> load_params(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<torch::Tensor> out;
  const c10::IValue list = torch::pickle_load(bytes);
  for (const c10::IValue& v : list.toListRef()) out.push_back(v.toTensor());
  return out;
}

// True once a replica has logged step `step` (the launcher's clock for --lighthouse-down).
bool reached(const std::string& out, int64_t step) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(out, ec)) {
    if (entry.path().filename().string().rfind("steps.", 0) != 0) continue;
    for (const std::string& line : read_lines(entry.path().string())) {
      StepRecord r;
      if (parse_step(line, r) && r.step >= step) return true;
    }
  }
  return false;
}

bool check(bool ok, const std::string& what) {
  ddp::log("check: " + what + ": " + (ok ? "OK" : "FAILED"));
  return ok;
}

// The run's checks, from the step logs (Note [The step log is the schedule]).
bool check_run(const std::string& out, const ddp::toy::TrainConfig& cfg, const Outer& outer) {
  std::map<int64_t, StepRecord> schedule;
  std::map<std::string, std::string> finals;
  bool agree = true;
  struct Fault { std::string id, what; double at; int64_t step; };
  std::vector<Fault> faults;
  std::vector<std::pair<double, std::vector<double>>> recoveries;  // failed at, then quorum, group, healed, done
  std::vector<std::string> recovered_ids;
  std::vector<HealRecord> heals;
  struct Commit {
    double at;
    std::string id;
    int64_t step;
  };
  std::vector<Commit> commits;  // when each replica committed each step
  for (const auto& entry : std::filesystem::directory_iterator(out)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("steps.", 0) != 0) continue;
    const std::string id = name.substr(6, name.size() - 10);
    double failed = -1;
    for (const std::string& line : read_lines(entry.path().string())) {
      StepRecord r;
      std::istringstream words(line);
      std::string kind;
      words >> kind;
      if (parse_step(line, r)) {
        auto [it, fresh] = schedule.emplace(r.step, r);
        if (!fresh && format_step(it->second) != format_step(r)) {
          ddp::log("step " + std::to_string(r.step) + ": " + id + " logged '" + format_step(r) + "', another '" + format_step(it->second) + "'");
          agree = false;
        }
      } else if (kind == "committed") {
        std::string at_word;
        int64_t step = 0;
        double at = 0;
        words >> step >> at_word >> at;
        commits.push_back({at, id, step});
      } else if (kind == "healed") {
        std::string from_word, step_word;
        HealRecord h{id, "", 0};
        words >> from_word >> h.donor >> step_word >> h.step;
        heals.push_back(h);
      } else if (kind == "final") {
        words >> finals[id];
      } else if (kind == "fault") {
        std::string where, step_word, at_word;
        int64_t step = 0;
        double at = 0;
        words >> where >> step_word >> step >> at_word >> at;
        faults.push_back({id, where + " of step " + std::to_string(step), at, step});
      } else if (kind == "failed") {
        words >> failed;
      } else if (kind == "recovered" && failed >= 0) {
        std::vector<double> t(4);
        for (double& v : t) words >> v;
        recoveries.push_back({failed, t}), recovered_ids.push_back(id);
        failed = -1;
      }
    }
  }
  bool ok = true;
  bool whole = static_cast<int64_t>(schedule.size()) == cfg.steps, follow = true;
  int64_t next = 0;
  for (const auto& [step, r] : schedule) {
    follow = follow && r.position == next;
    next = r.position + static_cast<int64_t>(r.contributors.size()) * r.batch * r.ranks;
  }
  ok &= check(agree && whole && follow, "the step logs agree on " + std::to_string(schedule.size()) + " of " + std::to_string(cfg.steps) +
                                            " steps, and their samples follow each other without a gap or an overlap (samples 0 to " +
                                            std::to_string(next - 1) + ")");
  std::vector<StepRecord> steps;
  int most = 0, most_ranks = 1;  // contributors a step, and ranks a contributor
  bool local = false;
  for (const auto& [step, r] : schedule) {
    steps.push_back(r), most = std::max(most, static_cast<int>(r.contributors.size()));
    most_ranks = std::max(most_ranks, static_cast<int>(r.ranks));
    local = local || r.average != "gradients";
  }
  // At most 2 contributors a step, of at most 2 ranks each, the replays' sums are the all-reduces'
  // bit for bit (a+b in either order, and adding zeros changes nothing); from 3, Gloo's ring adds
  // in its own order (chapter 03's Note [Ring against c10d: when the bits agree]), across the
  // contributors or inside a group (05's DDP), so the tolerance of one process holds.
  const bool exact = most <= 2 && most_ranks <= 2;
  const std::string apart = std::to_string(most) + " contributors" +
                            (most_ranks > 2 ? " of " + std::to_string(most_ranks) + " ranks" : "") + " a step: Gloo's ring adds in its own order";
  if (local) {  // local SGD: replicas differ between averages; each is held to its own replay
    const auto replayed = replay_local(steps, heals, cfg, outer);
    bool all = !finals.empty();
    double worst = 0;
    for (const auto& [id, f] : finals) {
      if (!replayed.count(id)) {
        all = false;
        continue;
      }
      const bool same_bits = ddp::toy::fingerprint(replayed.at(id)) == f;
      const double diff = ddp::toy::max_abs_diff(replayed.at(id), load_params(out + "/params." + id + ".pt"));
      worst = std::max(worst, diff);
      all = all && (exact ? same_bits : diff <= ddp::toy::kTolerance);
    }
    char diff_text[32];
    std::snprintf(diff_text, sizeof(diff_text), "%.3g", worst);
    ok &= check(all, std::to_string(finals.size()) + " replica(s) finished, each equal to a single-process replay of its own " +
                         "steps and the averages (" + (outer.lr > 0 ? "DiLoCo" : "local SGD") + "): " +
                         (exact ? "bit-identical (at most 2 contributors a step)" : "max |diff| " + std::string(diff_text) + " <= 1e-05 (" + apart + ")"));
  }
  std::string fp;
  bool same = !finals.empty();
  for (const auto& [id, f] : finals) same = same && (fp.empty() || f == fp), fp = f;
  if (!local) ok &= check(same, std::to_string(finals.size()) + " replica(s) finished, all with params fingerprint " + fp);
  if (!local && !finals.empty()) {
    const std::vector<torch::Tensor> theirs = load_params(out + "/params." + finals.begin()->first + ".pt");
    const std::vector<torch::Tensor> mine = replay(steps, cfg);
    const std::string replayed = ddp::toy::fingerprint(mine);
    const double diff = ddp::toy::max_abs_diff(mine, theirs);
    char diff_text[32];
    std::snprintf(diff_text, sizeof(diff_text), "%.3g", diff);
    ok &= check(exact ? replayed == fp : diff <= ddp::toy::kTolerance,
                "a single-process replay of the membership schedule: fingerprint " + replayed +
                    (exact ? ", bit-identical to the replicas' (at most 2 contributors a step)"
                           : ", max |diff| " + std::string(diff_text) + " <= 1e-05 (" + apart + ")"));
  }
  std::sort(commits.begin(), commits.end(), [](const Commit& a, const Commit& b) { return a.at < b.at; });
  for (const Fault& f : faults) {
    bool said = false;
    for (size_t k = 0; k < recoveries.size() && !said; ++k) {  // a step failed: the recovery's parts
      const auto& [failed, t] = recoveries[k];
      if (failed < f.at) continue;
      char line[160];
      std::snprintf(line, sizeof(line), ": %.3fs = detection %.3fs + quorum %.3fs + new group %.3fs + healing %.3fs + the step %.3fs",
                    t[3] - f.at, failed - f.at, t[0] - failed, t[1] - t[0], t[2] - t[1], t[3] - t[2]);
      ddp::log("from the fault (" + f.id + ", " + f.what + ") to the next committed step on " + recovered_ids[k] + line);
      said = true;
    }
    for (const Commit& c : commits) {  // no step failed (a replica lost before it asked, or after its vote)
      if (said || c.at < f.at || c.id == f.id || c.step < f.step) continue;
      char line[120];
      std::snprintf(line, sizeof(line), ": %.3fs (no step failed: the next quorum left it out)", c.at - f.at);
      ddp::log("from the fault (" + f.id + ", " + f.what + ") to the next committed step on " + c.id + line);
      said = true;
    }
  }
  return ok;
}

}  // namespace

int launch(const Options& o) {
  ddp::set_log_identity(o.check_only ? "check" : "launcher");
  if (o.check_only && !std::filesystem::is_directory(o.out)) throw ddp::UsageError("--check: no run folder " + o.out);
  if (o.check_only) return check_run(o.out, o.train.cfg, o.outer) ? ddp::kExitOk : ddp::kExitFailure;
  std::string run = o.run, out = o.out;
  if (!o.out_given) {  // a run of its own: its own name (the lighthouse refuses strangers) and folder
    char stamp[32];
    const std::time_t now = std::time(nullptr);
    std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", std::localtime(&now));
    run = o.run + "-" + stamp + "-" + std::to_string(::getpid());
    out = "runs/08_fault_tolerance/" + run;
  }
  std::error_code ec;
  std::filesystem::create_directories(out, ec);  // before any replica writes into it
  if (!o.train.save_init.empty()) std::filesystem::create_directories(std::filesystem::path(o.train.save_init).parent_path(), ec);
  for (const auto& entry : std::filesystem::directory_iterator(out, ec)) {  // an earlier run's files: replaced, or refused
    const std::string name = entry.path().filename().string();
    if (name.rfind("steps.", 0) != 0 && name.rfind("params.", 0) != 0) continue;
    if (!o.reset) throw ddp::UsageError(out + " holds an earlier run's step logs (" + name + "): --reset replaces them, or give another --out");
    std::filesystem::remove(entry.path());
  }
  std::map<std::string, std::string> injected;
  for (const std::string& inject : o.faults) {
    const size_t colon = inject.find(':');
    const std::string id = inject.substr(0, colon == std::string::npos ? 0 : colon);
    bool known = false;
    for (int r = 0; r < o.replicas; ++r) known = known || id == "r" + std::to_string(r);
    if (colon == std::string::npos || !known)
      throw ddp::UsageError("--inject '" + inject + "' is not ID:WHERE@STEP with ID one of r0..r" + std::to_string(o.replicas - 1));
    parse_fault(inject.substr(colon + 1), "--inject");
    injected[id] = inject.substr(colon + 1);
  }
  const int port = ddp::find_free_port();
  const ddp::toy::TrainConfig& cfg = o.train.cfg;
  std::unique_ptr<ddp::SimulatedHosts> hosts;  // --link: replica k on host k % N, the lighthouse on host 0
  if (!o.link.empty()) {
    hosts = std::make_unique<ddp::SimulatedHosts>(o.replicas, ddp::parse_link_rate(o.link));
    ddp::log(std::to_string(o.replicas) + " replicas as hosts " + ddp::SimulatedHosts::address(0) + ".. on " +
             ddp::describe_rate(hosts->bits_per_s()) + " links to one bridge");
  }
  const std::string lighthouse_host = hosts ? ddp::SimulatedHosts::address(0) : "127.0.0.1";
  const std::vector<std::string> lighthouse_args{
      "08_fault_tolerance", "--lighthouse-only", "--port", std::to_string(port), "--run", run,
      "--min-replicas", std::to_string(o.quorum.min_replicas), "--expect", std::to_string(o.replicas), "--join-timeout", num(o.quorum.join_timeout_s),
      "--heartbeat-timeout", num(o.quorum.heartbeat_timeout_s)};
  auto replica_args = [&](const std::string& id) {
    std::vector<std::string> a{"08_fault_tolerance", "--replica-id", id, "--lighthouse", lighthouse_host + ":" + std::to_string(port),
                               "--run", run, "--out", out, "--steps", std::to_string(cfg.steps), "--lr", num(cfg.lr),
                               "--batch", std::to_string(cfg.batch), "--seed", std::to_string(cfg.seed), "--optimizer",
                               cfg.optimizer, "--momentum", num(cfg.momentum), "--contributors", std::to_string(o.contributors),
                               "--ranks-per-replica", std::to_string(o.ranks_per_replica),
                               "--timeout", num(o.timeout_s), "--quorum-deadline", num(o.quorum_deadline_s), "--step-ms",
                               num(o.step_ms), "--sync-every", std::to_string(o.sync_every), "--outer-lr",
                               num(o.outer.lr), "--outer-momentum", num(o.outer.momentum)};
    if (injected.count(id)) a.push_back("--fault"), a.push_back(injected[id]);
    if (id == "r0" && !o.train.save_init.empty()) a.push_back("--save-init"), a.push_back(o.train.save_init);
    return a;
  };
  ddp::log("run '" + run + "': a lighthouse on " + lighthouse_host + ":" + std::to_string(port) + " and " + std::to_string(o.replicas) +
           " replicas; step logs in " + out);
  signal(SIGINT, [](int) { interrupted = 1; });
  signal(SIGTERM, [](int) { interrupted = 1; });
  pid_t lighthouse = start(lighthouse_args, hosts.get(), 0);
  std::vector<Child> children;
  auto start_replica = [&](int k) { return start(replica_args("r" + std::to_string(k)), hosts.get(), k % o.replicas); };
  for (int r = 0; r < o.replicas; ++r) children.push_back({"r" + std::to_string(r), start_replica(r)});
  int next_id = o.replicas, failed = 0;
  std::vector<double> replace_at;
  const double t0 = ddp::monotonic_seconds(), limit = 60 + cfg.steps * 1.0 + 2 * o.quorum_deadline_s;
  bool lighthouse_killed = false, lighthouse_back = false;
  double down_since = 0;
  auto running = [&] { return std::count_if(children.begin(), children.end(), [](const Child& c) { return c.running; }); };
  while (running() > 0 || !replace_at.empty()) {
    const double now = ddp::monotonic_seconds() - t0;
    if (interrupted || now > limit) {
      for (Child& c : children) if (c.running || c.stopped) kill(c.pid, SIGKILL);
      kill(lighthouse, SIGKILL);
      while (waitpid(-1, nullptr, 0) > 0) {}
      if (interrupted) ddp::log("interrupted: every replica and the lighthouse stopped");
      else ddp::log("the run did not end within " + ddp::seconds(limit) + ": every replica and the lighthouse stopped");
      return interrupted ? 130 : ddp::kExitFailure;
    }
    if (o.lighthouse_down_s > 0 && !lighthouse_killed && reached(out, o.lighthouse_down_step)) {
      down_since = now;
      kill(lighthouse, SIGKILL), waitpid(lighthouse, nullptr, 0), lighthouse_killed = true;
      ddp::log("killed the lighthouse (--lighthouse-down): back in " + ddp::seconds(o.lighthouse_down_s));
    }
    if (lighthouse_killed && !lighthouse_back && now >= down_since + o.lighthouse_down_s) {
      lighthouse = start(lighthouse_args, hosts.get(), 0), lighthouse_back = true;
      ddp::log("started the lighthouse again");
    }
    for (size_t k = 0; k < replace_at.size(); ++k) {
      if (now < replace_at[k]) continue;
      const std::string id = "r" + std::to_string(next_id);
      children.push_back({id, start_replica(next_id++), true});
      ddp::log("started " + id + ", a replacement");
      replace_at.erase(replace_at.begin() + static_cast<long>(k));
      break;
    }
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG | WUNTRACED);
    for (Child& c : children) {
      if (pid <= 0 || c.pid != pid || !c.running) continue;
      c.running = false;
      if (WIFSTOPPED(status) || WIFSIGNALED(status)) {
        c.lost = true, c.stopped = WIFSTOPPED(status);
        ddp::log(c.id + (c.stopped ? " stopped (SIGSTOP): the others go on without it"
                                   : std::string(" was killed (") + strsignal(WTERMSIG(status)) + "): the others go on without it"));
        if (o.replace_after_s >= 0) replace_at.push_back(now + o.replace_after_s);
      } else if (WEXITSTATUS(status) != 0) {
        ddp::log(c.id + " exited with code " + std::to_string(WEXITSTATUS(status)));
        ++failed;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (Child& c : children) if (c.stopped) kill(c.pid, SIGKILL), kill(c.pid, SIGCONT), waitpid(c.pid, nullptr, 0);
  kill(lighthouse, SIGTERM), waitpid(lighthouse, nullptr, 0);
  ddp::log(std::to_string(children.size()) + " replicas ran, " +
           std::to_string(std::count_if(children.begin(), children.end(), [](const Child& c) { return c.lost; })) + " lost, " +
           std::to_string(failed) + " failed; checking the run");
  const bool ok = check_run(out, cfg, o.outer);
  return ok && failed == 0 ? ddp::kExitOk : ddp::kExitFailure;
}

}  // namespace ch08
