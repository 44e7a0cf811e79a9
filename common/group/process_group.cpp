// provides: the process-group layer: store, roll call, Gloo/NCCL backend, with loud bounded failures.
#include "common/group/process_group.h"

#include <pwd.h>
#include <unistd.h>

#include <sstream>
#include <thread>

#ifdef USE_C10D_NCCL
#include <c10/cuda/CUDAFunctions.h>
#endif

#include "common/compute/blas.h"
#include "common/basics/errors.h"
#include "common/basics/failure.h"
#include "common/basics/log.h"
#include "common/launch/net.h"
#include "common/group/watchdog.h"

namespace ddp {
namespace {

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }
std::string where(const RankInfo& i) {
  return i.file_init() ? i.init.value : i.master_addr.value + ":" + std::to_string(i.master_port.value);
}

// "--master-port N (free right now) or MASTER_PORT=N": the fix every port refusal offers.
std::string free_port_hint() {
  const std::string port = std::to_string(find_free_port());
  return "--master-port " + port + " (free right now) or MASTER_PORT=" + port;
}

std::string join_ints(const std::vector<int>& v) {
  std::ostringstream os;
  for (size_t k = 0; k < v.size(); ++k) os << (k ? ", " : "") << v[k];
  return os.str();
}

}  // namespace

void check_can_start(const RankInfo& info) {
  validate(info);
  if (info.backend.value != "nccl") return;
  // Named as the user gave it: a default chosen from DDP_GPU_COUNT is no "--backend nccl".
  const std::string backend = info.backend.source == "--backend" ? std::string("--backend nccl")
                                                                 : "backend nccl (" + info.backend.source + ")";
  if (!kHasNccl) {
    throw UsageError(backend + ": this LibTorch (" TORCH_VERSION ") was built without NCCL (a CPU build): "
                     "use --backend gloo, or build with the CUDA LibTorch (scripts/test.sh builds both)");
  }
  if (!torch::cuda::is_available()) {
    throw UsageError(backend + " needs a CUDA GPU, and none is visible on host " + info.host +
                     " (torch::cuda::is_available() is false): use --backend gloo");
  }
  const int gpus = static_cast<int>(torch::cuda::device_count());
  if (info.gpu_slot() >= gpus) {
    const std::string who = info.simulated_nodes > 1 ? "rank " + std::to_string(info.rank.value) + " (of " +
                                                           std::to_string(info.simulated_nodes) + " simulated nodes on this host)"
                                                     : "local rank " + std::to_string(info.local_rank.value);
    throw UsageError(who + " needs GPU " + std::to_string(info.gpu_slot()) + " but host " + info.host + " has " +
                     std::to_string(gpus) + ": start at most one rank per GPU (NCCL refuses two ranks on one GPU)");
  }
}

GpuCount visible_gpus() {
  return gpu_count_from(process_env(), [] {
    return torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
  });
}

std::string describe_compute(const torch::Device& device) {
  if (device.is_cuda()) return device.str();
  const int threads = at::get_num_threads();
  return "cpu, BLAS " + blas_in_use().name + ", " + std::to_string(threads) + " intra-op thread" + (threads == 1 ? "" : "s");
}

void log_backend_note(const RankInfo& info) {
  if (!info.backend_note.empty() && info.local_rank.value == 0) log(info.backend_note);
}

RankInfo resolve_rank_info(const CommonFlags& flags) { return resolve_rank_info(flags, process_env(), visible_gpus); }

// Note [Leaving the group]
// A process group owns threads and connections: NCCL's watchdog and heartbeat monitor (which
// polls the store), Gloo's pairs. Leaving in the wrong order hangs or warns: released after
// its store, ~ProcessGroupNCCL waits for ever on a heartbeat monitor polling a store that is
// gone; never shut down, it warns "destroy_process_group() was not called". So, as
// torch.distributed.destroy_process_group() does: shut the backend down first (abort it
// instead when an exception is unwinding: pending work may never finish), release it, and only
// then the store. Python's examples call it at the end of main; here the Group's destructor
// does, on every path out, the error paths included.
void Group::destroy() noexcept {
  if (pg) {
    try {
      shutdown_backend(*pg, std::uncaught_exceptions() > 0);
    } catch (const std::exception& e) {
      log("leaving the process group: " + short_what(e));
    }
    pg.reset();
  }
  store.reset();
}

torch::Device device_for(const RankInfo& info) {
  if (info.backend.value == "nccl") return torch::Device(torch::kCUDA, info.gpu_slot());
  return torch::Device(torch::kCPU);
}

c10::intrusive_ptr<c10d::Store> make_store(const RankInfo& info) {
  if (info.file_init()) {
    // Every rank opens the same file; it must be on a file system all of them see.
    return c10::make_intrusive<c10d::FileStore>(info.file_path(), info.world_size.value);
  }
  const bool server = info.rank.value == 0 && !info.external_store.value;
  c10d::TCPStoreOptions so;
  so.port = static_cast<std::uint16_t>(info.master_port.value);
  so.isServer = server;
  so.numWorkers = info.world_size.value;
  // TCPStore's own wait for workers cannot say who is missing; the roll call does.
  so.waitWorkers = false;
  so.timeout = info.timeout();
  c10::intrusive_ptr<c10d::TCPStore> tcp;
  try {
    tcp = c10::make_intrusive<c10d::TCPStore>(info.master_addr.value, so);
  } catch (const std::exception& e) {
    const std::string what = short_what(e);
    // 1.13 says "errno: 98 - Address already in use", 2.x (libuv) "EADDRINUSE".
    const bool in_use = what.find("Address already in use") != std::string::npos ||
                        what.find("EADDRINUSE") != std::string::npos || what.find("errno: 98") != std::string::npos;
    if (server && in_use) {
      throw JoinError("port " + std::to_string(info.master_port.value) + " (from " + info.master_port.source +
                      ") is already in use on host " + info.host +
                      ": another run, or someone else's job, holds it. Pick a free port for every rank, e.g. " +
                      free_port_hint());
    }
    const std::string host_of_store = info.external_store.value ? "the launcher" : "rank 0";
    throw JoinError("could not reach the store at " + where(info) + " within " +
                    seconds(info.timeout_s.value) + ": " + host_of_store +
                    ", which hosts it, is not running: not started yet, or already finished (a group "
                    "that has formed and ended takes no late rank), or MASTER_ADDR/MASTER_PORT point "
                    "elsewhere (" + what + ")");
  }
  if (info.store_prefix.empty()) return tcp;
  return c10::make_intrusive<c10d::PrefixStore>(info.store_prefix, tcp);
}

// Note [Roll call]
// Gloo's constructor waits for every rank, but when one never comes it only says "Socket
// Timeout", long after the fact and without a name. So before building the backend every rank
// checks in through the store under its own key (rollcall/rank/<r>) and then polls until all
// keys exist. At the deadline, the missing keys are the missing ranks. The same keys catch two
// processes that claim one rank (the counter reaches 2), and the first rank to arrive records
// the world size so that a process started with another one is refused. Whoever detects such a
// conflict writes rollcall/abort, so that every other rank stops too instead of waiting.
//
// Note [One user's store]
// Twenty students on one server, each starting chapter 01 from two terminals with torchrun's
// default MASTER_PORT 29500: the first student's rank 0 holds the port (the others' rank 0 are
// refused: "port 29500 is already in use"), but every student's rank 1 reaches that store and
// would claim a rank in a stranger's group. A TCP store has no owner, so rank 0 records its user
// (rollcall/user) and every other rank waits for that record before it writes anything: a
// process of another user leaves at once with exit 2, and the owner's group goes on as if it had
// never come. (Rank 0 and not the first to arrive: students start rank 1 first as often as not.)
// Ranks of one job always run as one user (torchrun, srun, 02_spawn), so this refuses nothing
// real. The classroom's fix is a port per student: docs/teaching.md.
void roll_call(c10d::Store& store, const RankInfo& info) {
  const int r = info.rank.value, n = info.world_size.value;
  const std::string me = "rank " + std::to_string(r) + " on host " + info.host + " pid " + std::to_string(::getpid());
  const bool hosting = r == 0 && !info.external_store.value && !info.file_init();
  const std::string file_hint =
      info.file_init() ? " (with --init file://, a store file left by an earlier run also causes this: delete " +
                             info.file_path() + ")"
                       : "";
  const auto deadline = std::chrono::steady_clock::now() + info.timeout();
  std::vector<std::string> keys;
  for (int i = 0; i < n; ++i) keys.push_back("rollcall/rank/" + std::to_string(i));
  auto present_ranks = [&] {
    std::vector<int> present, missing;
    for (int i = 0; i < n; ++i) (store.check({keys[i]}) ? present : missing).push_back(i);
    return std::make_pair(present, missing);
  };
  // Stops every rank: the reason goes into the store, prefixed with its kind. The rank that
  // hosts the store waits (two seconds at most) until the others have read it: if it left at
  // once they would only see the store vanish ("Connection reset") and never learn why.
  auto linger_if_hosting = [&] {
    if (!hosting) return;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (store.add("rollcall/abort_seen", 0) < store.add("rollcall/arrived", 0) - 1 &&
           std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  };
  auto abort_all = [&](bool usage, const std::string& reason) {
    store.set("rollcall/abort", bytes((usage ? "U" : "J") + reason));
    linger_if_hosting();
    if (usage) throw UsageError(reason + file_hint);
    throw JoinError(reason);
  };

  try {
    // Note [One user's store]: rank 0 records its user; the others wait for the record (a
    // stranger's rank started first must not record itself) and leave if it is not theirs.
    const passwd* pw = ::getpwuid(::getuid());
    const std::string user = std::string(pw ? pw->pw_name : "?") + " (uid " + std::to_string(::getuid()) + ")";
    if (r == 0) {
      store.set("rollcall/user", bytes(user));
    } else {
      while (!store.check({"rollcall/user"}) && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      const std::string owner = store.check({"rollcall/user"}) ? text(store.get("rollcall/user")) : user;
      if (owner != user) {  // touch nothing more of a stranger's store
        throw UsageError("the store at " + where(info) + " belongs to a run of user " + owner + ", and you are " + user +
                         ": another user's job uses this port. Give your ranks a port of your own, e.g. " +
                         free_port_hint());
      }
    }
    store.add("rollcall/arrived", 1);  // processes, not ranks: two may claim one rank
    // The world size is checked before the rank is claimed: a claim from a process with the
    // wrong size could otherwise complete the others' roll call before it is refused.
    const std::string ws = std::to_string(n);
    const std::string first_ws = text(store.compareSet("rollcall/world_size", {}, bytes(ws)));
    if (first_ws != ws) {
      abort_all(true, "world sizes disagree: " + me + " was started with world size " + ws +
                          ", the first rank to arrive with world size " + first_ws);
    }
    // Each host chooses the default backend from its own GPUs (Note [Choosing the backend]):
    // a rank on Gloo and one on NCCL would never meet in a collective.
    const std::string mine = info.backend.value + " (" + info.backend.source + ")";
    const std::string first_backend = text(store.compareSet("rollcall/backend", {}, bytes(mine)));
    if (first_backend.substr(0, first_backend.find(' ')) != info.backend.value) {
      abort_all(true, "backends disagree: " + me + " chose " + mine + ", the first rank to arrive " + first_backend +
                          ". Give every rank the same --backend");
    }
    if (store.add(keys[r], 1) > 1) {
      abort_all(true, "rank " + std::to_string(r) + " was claimed by two processes (the second is " + me +
                          "): give every process its own --rank");
    }
    while (true) {
      if (store.check({"rollcall/abort"})) {
        const std::string reason = text(store.get("rollcall/abort"));
        store.add("rollcall/abort_seen", 1);
        linger_if_hosting();
        if (reason.rfind("U", 0) == 0) throw UsageError("another process stopped the roll call: " + reason.substr(1) + file_hint);
        throw JoinError(reason.substr(1));
      }
      if (store.check(keys)) return;
      if (std::chrono::steady_clock::now() > deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    auto [present, missing] = present_ranks();
    if (missing.empty()) return;  // the last one arrived just now
    abort_all(false, std::string(missing.size() == 1 ? "rank " : "ranks ") + join_ints(missing) + " never joined within " +
                         seconds(info.timeout_s.value) + " (world size " + ws + "; present: " + join_ints(present) +
                         "). Start the missing rank(s) with the same " +
                         (info.file_init() ? "--init " + info.init.value
                                           : "master address and port (" + where(info) + ")") +
                         ", or lower --world-size");
  } catch (const UsageError&) {
    throw;
  } catch (const JoinError&) {
    throw;
  } catch (const std::exception& e) {
    throw JoinError("lost the store at " + where(info) +
                    " during the roll call: " + (info.external_store.value ? "the launcher" : "rank 0") +
                    ", which hosts it, has exited; its own error says why (" + short_what(e) + ")");
  }
}

c10::intrusive_ptr<Backend> make_backend(const c10::intrusive_ptr<c10d::Store>& store, const RankInfo& info) {
  // Keys of the backend live apart from the roll call's, as torch.distributed does.
  auto pg_store = c10::make_intrusive<c10d::PrefixStore>("default_pg", store);
  const int r = info.rank.value, n = info.world_size.value;
  if (info.backend.value == "nccl") {
#ifdef USE_C10D_NCCL
    // Before anything touches the GPU: otherwise every rank creates a context on GPU 0
    // (the "extra memory on GPU 0" users report).
    c10::cuda::set_device(static_cast<c10::DeviceIndex>(info.local_rank.value));
    auto opts = c10d::ProcessGroupNCCL::Options::create();
    opts->timeout = info.timeout();
    return c10::make_intrusive<c10d::ProcessGroupNCCL>(pg_store, r, n, opts);
#else
    throw UsageError("--backend nccl: this build has no NCCL");  // check_can_start() says so earlier
#endif
  }
  auto opts = c10d::ProcessGroupGloo::Options::create(info.timeout());
  // Which network interface Gloo binds: GLOO_SOCKET_IFNAME as in PyTorch; loopback when the
  // master is local (a laptop); else the address this host's name resolves to.
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME")) {
    opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
  } else if (is_loopback(info.master_addr.value)) {
    opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  } else {
    opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  }
  try {
    return c10::make_intrusive<c10d::ProcessGroupGloo>(pg_store, r, n, opts);
  } catch (const std::exception& e) {
    throw JoinError("Gloo could not connect all ranks although all checked in: " + short_what(e) +
                    " (a rank died meanwhile, or ranks cannot reach each other's address; set GLOO_SOCKET_IFNAME)");
  }
}

std::chrono::milliseconds join_time_limit(const RankInfo& info) {
  // connecting to the store + roll call + Gloo's handshake, each bounded by --timeout.
  return 3 * info.timeout() + std::chrono::seconds(5);
}

Group init_process_group(const RankInfo& info) {
  check_can_start(info);
  Group g;
  g.info = info;
  // Built up in place: a failure half-way leaves a Group that still leaves in order.
  Watchdog watchdog(join_time_limit(info), "connecting to the store at " + where(info));
  g.store = make_store(info);
  watchdog.doing("in the roll call, waiting for the store at " + where(info) +
                 " to answer (if another program holds that port, it is not our store)");
  roll_call(*g.store, info);
  watchdog.doing("connecting the " + info.backend.value + " backend to every peer");
  g.pg = make_backend(g.store, info);
  return g;
}

std::optional<Group> join_or_explain(const CommonFlags& flags) {
  RankInfo info = resolve_rank_info(flags);
  if (flags.explain_env) {
    std::printf("%s", explain(info).c_str());
    validate(info);
    return std::nullopt;
  }
  check_can_start(info);  // before tagging the log: "rank 3/2" would be no name at all
  set_log_identity(info.rank.value, info.world_size.value);
  set_compute_threads(info.local_world_size.value);  // Note [BLAS threads]
  log_backend_note(info);
  if (info.local_rank.value == 0 && info.backend.value == "gloo") {
    if (const std::string w = reference_blas_warning(blas_in_use()); !w.empty()) log(w);
  }
  return init_process_group(info);
}

}  // namespace ddp
