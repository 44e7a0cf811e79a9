// provides: the process-group layer: store, Gloo/NCCL backend, joining and leaving, with loud bounded
// failures (the roll call is in roll_call.cpp).
#include "common/group/process_group.h"

#include <csignal>

#ifdef USE_C10D_NCCL
#include <c10/cuda/CUDAFunctions.h>
#endif

#include "common/compute/blas.h"
#include "common/basics/errors.h"
#include "common/basics/failure.h"
#include "common/basics/log.h"
#include "common/launch/net.h"
#include "common/group/collective_count.h"
#include "common/group/watchdog.h"

namespace ddp {

void check_can_start(const RankInfo& info) {
  validate(info);
  if (info.backend.value != "nccl") return;
  // Named as the user gave it: a default chosen from DDP_GPU_COUNT is no "--backend nccl".
  const std::string backend = info.backend.source == "--backend" ? std::string("--backend nccl")
                                                                 : "backend nccl (" + info.backend.source + ")";
  if (!kHasNccl) {
    throw UsageError(backend + ": this LibTorch (" TORCH_VERSION ") was built without NCCL (a CPU build): "
                     "use --backend gloo, or build with the CUDA LibTorch (scripts/build.sh cuda)");
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
// A process group owns threads and connections: NCCL's watchdog and heartbeat monitor (threads
// that watch for hung collectives; the monitor polls the store), Gloo's pairs (a connection to each peer). Leaving in the
// wrong order hangs or warns: released after its store, ~ProcessGroupNCCL waits for ever on a
// heartbeat monitor polling a store that is gone; never shut down, it warns
// "destroy_process_group() was not called". So, as torch.distributed.destroy_process_group()
// does in PyTorch 2.11 (distributed_c10d.py: pg.shutdown() for every group, then its maps that
// hold them cleared): shut the backend down first, release it, and only then the store. Two
// differences of ours: when an exception is unwinding we abort instead of shutting down (pending
// work may never finish), and on LibTorch 1.13, which has no shutdown, only the order of the
// releases remains (compat.h). Python's examples call it at the end of main; here the Group's
// destructor does, on every path out, the error paths included.
Group::Group(RankInfo i, c10::intrusive_ptr<c10d::Store> s, c10::intrusive_ptr<Backend> p)
    : info(std::move(i)), store(std::move(s)), pg(std::move(p)) {
  count_collectives_if_asked(*this);  // Note [Counted by the backend]: chapter 01 makes its Group so
}

void Group::destroy() noexcept {
  report_collective_count(*this);  // DDP_COUNT_COLLECTIVES=1: Note [Counted by the backend]
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
    throw JoinError("could not reach the store at " + info.store_address() + " within " +
                    seconds(info.timeout_s.value) + ": " + host_of_store +
                    ", which hosts it, is not running: not started yet, or already finished (a group "
                    "that has formed and ended takes no late rank), or MASTER_ADDR/MASTER_PORT point "
                    "elsewhere (" + what + ")");
  }
  if (info.store_prefix.empty()) return tcp;
  return c10::make_intrusive<c10d::PrefixStore>(info.store_prefix, tcp);
}

c10::intrusive_ptr<Backend> make_backend(const c10::intrusive_ptr<c10d::Store>& store, const RankInfo& info) {
  // Keys of the backend live apart from the roll call's, as torch.distributed does (PrefixStore: "default_pg/" before each key).
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
    return make_gloo(pg_store, r, n, opts);  // Gloo, counted when asked: Note [Counted by the backend]
  } catch (const std::exception& e) {
    throw JoinError("Gloo could not connect all ranks although all checked in: " + short_what(e) +
                    " (a rank died meanwhile, or ranks cannot reach each other's address; set GLOO_SOCKET_IFNAME)");
  }
}

std::chrono::milliseconds join_time_limit(const RankInfo& info) {
  // connecting to the store + roll call + Gloo's handshake, each bounded by --timeout.
  return 3 * info.timeout() + std::chrono::seconds(5);
}

// Note [A peer gone mid-write]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A rank that writes to a peer whose process has died gets SIGPIPE from the kernel, and its
// default action ends the process at once: the launcher reports "signal 13 (Broken pipe)" and
// the survivor never says which rank is gone (a rank sending to a peer just killed). A Python
// rank never dies so: Python ignores SIGPIPE from its start, and
// every PyTorch script runs with it ignored. So every rank ignores it when it joins: the write
// fails with EPIPE, Gloo throws, and the flight recorder names the gone rank.
Group init_process_group(const RankInfo& info) {
  check_can_start(info);
  std::signal(SIGPIPE, SIG_IGN);
  Group g;
  g.info = info;
  // Built up in place: a failure half-way leaves a Group that still leaves in order.
  Watchdog watchdog(join_time_limit(info), "connecting to the store at " + info.store_address());
  g.store = make_store(info);
  watchdog.doing("in the roll call, waiting for the store at " + info.store_address() +
                 " to answer (if another program holds that port, it is not our store)");
  roll_call(*g.store, info);
  watchdog.doing("connecting the " + info.backend.value + " backend to every peer");
  g.pg = make_backend(g.store, info);
  count_collectives_if_asked(g);  // DDP_COUNT_COLLECTIVES=1: Note [Counted by the backend]
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
