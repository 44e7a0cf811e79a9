// provides: rank resolution from flags, torchrun's and Slurm's environment, and its validation.
#include "common/launch/rank_env.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "common/basics/errors.h"
#include "common/slurm/hostlist.h"
#include "common/launch/net.h"

namespace ddp {
namespace {

constexpr int kDefaultPort = 29500;
constexpr double kDefaultTimeoutS = 60.0;

int parse_int(const std::string& text, const std::string& what) {
  int v = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || p != end) {
    throw UsageError(what + "='" + text + "' is not an integer");
  }
  return v;
}

// The first of `names` that is set in the environment, parsed as an int.
std::optional<Sourced<int>> env_int(const EnvLookup& env, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (auto v = env(n)) return Sourced<int>{parse_int(*v, std::string("environment variable ") + n), std::string("env ") + n};
  }
  return std::nullopt;
}

template <class T>
Sourced<T> pick(const std::optional<T>& flag, const char* flag_name, std::optional<Sourced<T>> from_env,
                T fallback, const std::string& fallback_source) {
  if (flag) return {*flag, flag_name};
  if (from_env) return *from_env;
  return {fallback, fallback_source};
}

// Note [A Slurm task checks its job]
// Under srun every task is one rank: SLURM_PROCID is the rank and SLURM_NTASKS the world size.
// Three mistakes turn that into a rank that waits for peers that never come, so they are refused
// before joining: starting the trainer in the batch script itself, without srun (the batch step
// has SLURM_PROCID=0 and SLURM_NTASKS=N too, but no SLURM_STEP_ID); a --world-size or
// WORLD_SIZE that disagrees with the number of tasks; and a job environment that contradicts
// itself (tasks per node that do not add up, a node list of another length).
void check_slurm_task(const RankInfo& r, const EnvLookup& env) {
  if (r.rank.source != "env SLURM_PROCID") return;  // ranks come from elsewhere: Slurm only hosts us
  const auto ntasks = env_int(env, {"SLURM_NTASKS"});
  const std::string job = env("SLURM_JOB_ID").value_or("");
  if (env("SLURM_JOB_ID") && ntasks && ntasks->value > 1 && !env("SLURM_STEP_ID")) {
    throw UsageError("this is the batch script of Slurm job " + job + " (SLURM_PROCID is set, SLURM_STEP_ID is not), not one of "
                     "its tasks: start one task per rank with srun (see 06_slurm/*.sbatch); alone it would wait for the other " +
                     std::to_string(ntasks->value - 1) + " rank(s), which never come");
  }
  if (ntasks && r.world_size.value != ntasks->value) {
    throw UsageError("world size " + std::to_string(r.world_size.value) + " (from " + r.world_size.source +
                     ") disagrees with Slurm's task count SLURM_NTASKS=" + std::to_string(ntasks->value) +
                     ": under srun each task is one rank; drop it, or ask Slurm for that many tasks");
  }
  const auto nnodes = env_int(env, {"SLURM_NNODES"});
  if (auto tpn = env("SLURM_TASKS_PER_NODE")) {
    const std::vector<int> per_node = expand_tasks_per_node(*tpn);
    long sum = 0;
    for (int n : per_node) sum += n;
    if (ntasks && sum != ntasks->value) {
      throw UsageError("SLURM_TASKS_PER_NODE='" + *tpn + "' adds up to " + std::to_string(sum) + " tasks, SLURM_NTASKS says " +
                       std::to_string(ntasks->value));
    }
    if (nnodes && static_cast<int>(per_node.size()) != nnodes->value) {
      throw UsageError("SLURM_TASKS_PER_NODE='" + *tpn + "' lists " + std::to_string(per_node.size()) + " nodes, SLURM_NNODES says " +
                       std::to_string(nnodes->value));
    }
  }
  if (auto nl = env("SLURM_STEP_NODELIST"); nl && nnodes) {
    const size_t hosts = expand_hostlist(*nl).size();
    if (static_cast<int>(hosts) != nnodes->value) {
      throw UsageError("SLURM_STEP_NODELIST='" + *nl + "' has " + std::to_string(hosts) + " hosts, SLURM_NNODES says " +
                       std::to_string(nnodes->value));
    }
  }
}

}  // namespace

std::chrono::milliseconds RankInfo::timeout() const {
  return std::chrono::milliseconds(static_cast<long long>(timeout_s.value * 1000.0));
}

bool steers_rank_resolution(const std::string& name) {
  for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
                        "GLOO_SOCKET_IFNAME", "DDP_SIMULATED_NODES"}) {
    if (name == v) return true;
  }
  return name.rfind("SLURM_", 0) == 0 || name.rfind("TORCHELASTIC_", 0) == 0;
}

EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

int restart_count(const EnvLookup& env) {
  const auto v = env("TORCHELASTIC_RESTART_COUNT");
  return v ? parse_int(*v, "environment variable TORCHELASTIC_RESTART_COUNT") : 0;
}

GpuCount gpu_count_from(const EnvLookup& env, const std::function<int()>& real_count) {
  if (auto v = env("DDP_GPU_COUNT")) {
    const int n = parse_int(*v, "environment variable DDP_GPU_COUNT");
    if (n < 0) throw UsageError("environment variable DDP_GPU_COUNT='" + *v + "' must be a count of GPUs (0 or more)");
    return {n, "(env DDP_GPU_COUNT)"};
  }
  return {real_count(), "visible to LibTorch"};
}

void choose_default_backend(RankInfo& r, const GpuCount& gpus) {
  const int n = gpus.count, local = r.ranks_on_host();
  const std::string seen = std::to_string(n) + (n == 1 ? " GPU " : " GPUs ") + gpus.source;
  const std::string ranks = std::to_string(local) + " local rank" + (local == 1 ? "" : "s") +
                            (r.simulated_nodes > 1 ? " (" + std::to_string(r.simulated_nodes) + " simulated nodes)" : "");
  r.backend_note.clear();
  if (n > 0 && n >= local) {
    r.backend = {"nccl", "default: " + seen + " for " + ranks + ", one GPU each"};
  } else if (n > 0) {
    r.backend = {"gloo", "default: " + seen + " for " + ranks + "; NCCL needs one GPU per rank"};
    r.backend_note = "backend gloo on the CPU: host " + r.host + " has " + seen + " for " + ranks +
                     ", and NCCL needs one GPU per rank (start at most " + std::to_string(n) +
                     " rank(s) per host to use them, or --backend gloo to say so)";
  } else {
    r.backend = {"gloo", "default: no GPU " + gpus.source};
  }
}

RankInfo resolve_rank_info(const CommonFlags& f, const EnvLookup& env, const GpuQuery& gpus) {
  RankInfo r;
  r.host = hostname();

  r.rank = pick(f.rank, "--rank", env_int(env, {"RANK", "SLURM_PROCID"}), 0, "default");
  r.world_size = pick(f.world_size, "--world-size", env_int(env, {"WORLD_SIZE", "SLURM_NTASKS"}), 1, "default");

  // Slurm does not export tasks-on-this-node directly: read it from the per-node list.
  std::optional<Sourced<int>> slurm_local_ws;
  auto slurm_node = env_int(env, {"SLURM_NODEID"});
  if (auto tpn = env("SLURM_TASKS_PER_NODE"); tpn && slurm_node) {
    auto per_node = expand_tasks_per_node(*tpn);
    if (slurm_node->value >= 0 && slurm_node->value < static_cast<int>(per_node.size())) {
      slurm_local_ws = Sourced<int>{per_node[slurm_node->value], "env SLURM_TASKS_PER_NODE[SLURM_NODEID]"};
    }
  }
  r.local_world_size = env_int(env, {"LOCAL_WORLD_SIZE"}).value_or(
      slurm_local_ws.value_or(Sourced<int>{r.world_size.value, "default (= world size: one node)"}));
  r.local_rank = env_int(env, {"LOCAL_RANK", "SLURM_LOCALID"})
                     .value_or(Sourced<int>{r.rank.value, "default (= rank: one node)"});
  r.node_rank = env_int(env, {"GROUP_RANK", "SLURM_NODEID"})
                    .value_or(Sourced<int>{r.local_world_size.value > 0 ? r.rank.value / r.local_world_size.value : 0,
                                           "default (rank / local world size)"});

  // Under Slurm, without MASTER_ADDR, the first node of the step hosts the store. We expand
  // the node list ourselves: relying on `scontrol` made every node a world of one where it
  // was missing (pytorch#107021).
  std::optional<Sourced<std::string>> slurm_master;
  for (const char* var : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"}) {
    if (auto nl = env(var); nl && !slurm_master) {
      auto hosts = expand_hostlist(*nl);
      if (!hosts.empty()) slurm_master = Sourced<std::string>{hosts.front(), std::string("first host of env ") + var};
    }
  }
  std::optional<Sourced<std::string>> env_master;
  if (auto v = env("MASTER_ADDR")) env_master = Sourced<std::string>{*v, "env MASTER_ADDR"};
  r.master_addr = pick<std::string>(f.master_addr, "--master-addr", env_master ? env_master : slurm_master,
                                    "127.0.0.1", "default");

  // Two jobs sharing a node must not share a port: under Slurm derive it from the job id, as
  // PyTorch Lightning does (15000 + last four digits).
  std::optional<Sourced<int>> port_env = env_int(env, {"MASTER_PORT"});
  if (!port_env) {
    if (auto job = env("SLURM_JOB_ID")) {
      int id = parse_int(*job, "environment variable SLURM_JOB_ID");
      port_env = Sourced<int>{15000 + id % 10000, "derived from env SLURM_JOB_ID (15000 + id % 10000)"};
    }
  }
  r.master_port = pick(f.master_port, "--master-port", port_env, kDefaultPort, "default");

  r.external_store = {false, "default"};
  if (auto v = env("TORCHELASTIC_USE_AGENT_STORE")) {
    r.external_store = {*v == "True" || *v == "true" || *v == "1", "env TORCHELASTIC_USE_AGENT_STORE"};
    if (r.external_store.value) {
      // torchrun's agent keeps its own keys in the same store; workers of restart N live
      // under their own prefix so that a restarted job never sees the last attempt's keys.
      r.store_prefix = "/worker/attempt_" + env("TORCHELASTIC_RESTART_COUNT").value_or("0");
    }
  }

  if (auto sim = env_int(env, {"DDP_SIMULATED_NODES"})) {
    if (sim->value < 1) throw UsageError("environment variable DDP_SIMULATED_NODES=" + std::to_string(sim->value) + " must be 1 or more");
    r.simulated_nodes = sim->value;
  }

  check_slurm_task(r, env);
  if (auto job = env("SLURM_JOB_ID")) {  // for --explain-env: the job as Slurm described it
    r.slurm = "job " + *job + ", restart " + env("SLURM_RESTART_COUNT").value_or("0") + ", step " +
              env("SLURM_STEP_ID").value_or("none (batch script)");
    for (const char* var : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"}) {
      if (auto nl = env(var)) {
        std::string hosts;
        for (const auto& h : expand_hostlist(*nl)) hosts += " " + h;
        r.slurm += ", " + std::string(var) + "=" + *nl + " ->" + hosts;
        break;
      }
    }
    if (auto tpn = env("SLURM_TASKS_PER_NODE")) r.slurm += ", SLURM_TASKS_PER_NODE=" + *tpn;
  }

  if (f.backend) {
    r.backend = {*f.backend, "--backend"};
  } else {
    choose_default_backend(r, gpus());
  }
  r.init = pick<std::string>(f.init, "--init", std::nullopt, "env://", "default");
  r.timeout_s = pick<double>(f.timeout_s, "--timeout", std::nullopt, kDefaultTimeoutS, "default");
  return r;
}

void validate(const RankInfo& r) {
  auto from = [](const auto& s) { return " (from " + s.source + ")"; };
  if (r.world_size.value < 1) {
    throw UsageError("world size must be at least 1, got " + std::to_string(r.world_size.value) + from(r.world_size));
  }
  if (r.rank.value < 0 || r.rank.value >= r.world_size.value) {
    throw UsageError("rank " + std::to_string(r.rank.value) + from(r.rank) + " is out of range for world size " +
                     std::to_string(r.world_size.value) + from(r.world_size) + ": ranks are 0.." +
                     std::to_string(r.world_size.value - 1));
  }
  if (r.local_world_size.value < 1 || r.local_world_size.value > r.world_size.value) {
    throw UsageError("local world size " + std::to_string(r.local_world_size.value) + from(r.local_world_size) +
                     " must be between 1 and the world size " + std::to_string(r.world_size.value));
  }
  if (r.local_rank.value < 0 || r.local_rank.value >= r.local_world_size.value) {
    throw UsageError("local rank " + std::to_string(r.local_rank.value) + from(r.local_rank) +
                     " is out of range for local world size " + std::to_string(r.local_world_size.value) +
                     from(r.local_world_size));
  }
  if (r.master_port.value < 1 || r.master_port.value > 65535) {
    throw UsageError("port " + std::to_string(r.master_port.value) + from(r.master_port) +
                     " is out of range: use 1..65535 (above 1024 without root)");
  }
  if (r.master_addr.value.empty()) throw UsageError("master address is empty" + from(r.master_addr));
  if (r.backend.value != "gloo" && r.backend.value != "nccl") {
    throw UsageError("unknown backend '" + r.backend.value + "'" + from(r.backend) + ": use gloo or nccl");
  }
  if (r.init.value != "env://" && !(r.file_init() && r.file_path().size() > 1 && r.file_path()[0] == '/')) {
    throw UsageError("unknown init method '" + r.init.value + "'" + from(r.init) +
                     ": use env:// or file:///absolute/path");
  }
  if (!std::isfinite(r.timeout_s.value) || r.timeout_s.value <= 0) {
    throw UsageError("timeout must be a positive number of seconds" + from(r.timeout_s));
  }
}

std::string explain(const RankInfo& r) {
  std::ostringstream os;
  auto row = [&](const char* name, const auto& v) { os << "  " << name << " = " << v.value << "   <- " << v.source << "\n"; };
  os << "resolved settings on host " << r.host << ":\n";
  row("rank            ", r.rank);
  row("world_size      ", r.world_size);
  row("local_rank      ", r.local_rank);
  row("local_world_size", r.local_world_size);
  row("node_rank       ", r.node_rank);
  if (r.simulated_nodes > 1) os << "  simulated_nodes  = " << r.simulated_nodes << "   <- env DDP_SIMULATED_NODES (they share this host's GPUs)\n";
  row("master_addr     ", r.master_addr);
  row("master_port     ", r.master_port);
  os << "  external_store   = " << (r.external_store.value ? "yes" : "no") << "   <- " << r.external_store.source << "\n";
  if (!r.store_prefix.empty()) os << "  store_prefix     = " << r.store_prefix << "\n";
  row("backend         ", r.backend);
  row("init            ", r.init);
  row("timeout_s       ", r.timeout_s);
  if (!r.slurm.empty()) os << "  slurm            = " << r.slurm << "\n";
  return os.str();
}

}  // namespace ddp
