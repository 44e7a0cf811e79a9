// 01_join_group: separate processes find each other and form a process group.
//
// The lesson: a distributed job is N copies of one program. Each copy needs three facts —
// its rank, the world size, and where to meet (MASTER_ADDR:MASTER_PORT) — and a store that
// all of them reach. Through the store they exchange addresses and build a Gloo process
// group; the first collective (an all-reduce of the ranks) proves that the group works.
//
// Usage (one terminal per rank, same machine):
//   terminal 1:  ./build-cpu/01_join_group --rank 0 --world-size 2
//   terminal 2:  ./build-cpu/01_join_group --rank 1 --world-size 2
// The same, with torchrun's variables instead of flags:
//   RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 ./build-cpu/01_join_group
// See where every setting came from, without joining:
//   ./build-cpu/01_join_group --rank 1 --world-size 2 --explain-env
//
// Expected output (terminal 1; terminal 2 is the same with rank 1/2, without the last line):
//   [rank 0/2] joining: world size 2, env:// at 127.0.0.1:29500, backend gloo, timeout 60s
//   [rank 0/2] all 2 ranks checked in
//   [rank 0/2] Rank 0 has joined the process group!
//   [rank 0/2] check: all-reduce(SUM) of the ranks = 1, n(n-1)/2 = 1: OK
//   [rank 0/2] barrier passed: all 2 ranks passed the check

#include "common/basics/cli.h"
#include "common/basics/failure.h"
#include "common/basics/log.h"
#include "common/group/process_group.h"
#include "common/group/watchdog.h"

int main(int argc, char** argv) {
  CLI::App app{"01_join_group: start one per rank; they meet, all-reduce their ranks and check the sum"};
  ddp::CommonFlags flags;
  ddp::add_common_flags(app, flags);
  ddp::parse_flags(app, argc, argv);

  return ddp::guarded_main([&] {
    // 1. Who am I? Flags win over torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR, ...),
    //    which win over Slurm's (SLURM_PROCID, SLURM_NTASKS, ...), which win over defaults.
    ddp::RankInfo info = ddp::resolve_rank_info(flags);
    if (flags.explain_env) {
      std::printf("%s", ddp::explain(info).c_str());
      ddp::validate(info);  // still say what is wrong with it
      return ddp::kExitOk;
    }
    const int rank = info.rank.value, world = info.world_size.value;
    ddp::set_log_identity(rank, world);

    // 2. Refuse what cannot work before touching the network: rank >= world size, a port out
    //    of range, an unknown backend, nccl without a GPU. Exit code 2, nothing started.
    ddp::check_can_start(info);
    ddp::log_backend_note(info);  // GPUs, but too few of them for NCCL
    ddp::log("joining: world size " + std::to_string(world) + ", " + info.init.value +
             (info.file_init() ? "" : " at " + info.master_addr.value + ":" + std::to_string(info.master_port.value)) +
             ", backend " + info.backend.value + ", timeout " + ddp::seconds(info.timeout_s.value));

    // 3. A store everyone can reach: a small key-value server. With env:// rank 0 hosts it
    //    (a TCPStore on MASTER_PORT) and the others connect; with file:// it is a shared file.
    //    Each step below is bounded by --timeout; the watchdog also bounds the waits that
    //    LibTorch leaves unbounded (a port held by a program that is not a store).
    ddp::Watchdog watchdog(ddp::join_time_limit(info), "joining the process group");
    // c10::intrusive_ptr: LibTorch's reference-counted pointer, which c10d hands out.
    c10::intrusive_ptr<c10d::Store> store = ddp::make_store(info);

    // 4. Roll call: every rank checks in under its own key and waits for the others. If one
    //    never comes, everyone stops at the timeout with its number, instead of hanging.
    //    See Note [Roll call] in common/group/roll_call.cpp.
    ddp::roll_call(*store, info);
    ddp::log("all " + std::to_string(world) + " ranks checked in");

    // 5. The process group: Gloo exchanges each rank's address through the store and opens a
    //    connection to every peer. From here on the store is no longer needed for data.
    //    Gloo works on CPU tensors, NCCL on tensors of this rank's GPU (cuda:<local rank>).
    // ddp::Backend: the base class of ProcessGroupGloo and ProcessGroupNCCL (common/group/compat.h).
    c10::intrusive_ptr<ddp::Backend> pg = ddp::make_backend(store, info);
    watchdog.disarm();
    ddp::log("Rank " + std::to_string(rank) + " has joined the process group!");
    // The group owns store and backend from here, and leaves in order on every way out: see
    // Note [Leaving the group] in common/group/process_group.cpp (destroy_process_group in Python).
    ddp::Group group(info, std::move(store), std::move(pg));

    // 6. The first collective. Every rank contributes its rank; all-reduce(SUM) leaves the
    //    same total on every rank: 0 + 1 + ... + (n-1) = n(n-1)/2. Collectives are
    //    asynchronous: allreduce() returns a Work handle, wait() blocks until it is done.
    std::vector<torch::Tensor> t{torch::full({1}, rank, torch::TensorOptions(torch::kFloat64).device(ddp::device_for(info)))};
    group.pg->allreduce(t)->wait();
    const double got = t[0].item<double>(), want = world * (world - 1) / 2.0;
    ddp::log("check: all-reduce(SUM) of the ranks = " + std::to_string(static_cast<long long>(got)) +
             ", n(n-1)/2 = " + std::to_string(static_cast<long long>(want)) + (got == want ? ": OK" : ": WRONG"));
    DDP_CHECK(got == want, "all-reduce returned " << got << ", expected " << want);

    // 7. A barrier before leaving: rank 0 hosts the store, and leaving while a peer still
    //    talks to it would break that peer. A rank whose check failed never reaches it, so
    //    past it rank 0 may speak for everyone (log0: only rank 0 prints).
    group.pg->barrier()->wait();
    ddp::log0("barrier passed: all " + std::to_string(world) + " ranks passed the check");
    group.destroy();  // 8. Leave: shut the backend down, then let the store go
    return ddp::kExitOk;
  });
}
