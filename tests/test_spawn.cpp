// 02_spawn as a real process: N workers, simulated nodes, injected failures and the root-cause table.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "proc.h"

using namespace ddp_test;

namespace {

ProcSpec spawn(std::vector<std::string> args) {
  ProcSpec s{{"02_spawn"}};
  if (std::find(args.begin(), args.end(), "--timeout") == args.end()) args.insert(args.end(), {"--timeout", "5"});
  for (auto& a : args) s.argv.push_back(a);
  return s;
}

}  // namespace

TEST(Spawn, EightWorkersJoinAndCheckTheSum) {
  auto r = run_one(spawn({"--world-size", "8"}), 90);
  ASSERT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (int k = 0; k < 8; ++k) EXPECT_EQ(count(r.output, "Rank " + std::to_string(k) + " has joined"), 1) << r.output;
  EXPECT_EQ(count(r.output, "all-reduce(SUM) of the ranks = 28, n(n-1)/2 = 28: OK"), 8) << r.output;
  EXPECT_NE(r.output.find("all 8 workers exited 0"), std::string::npos) << r.output;
  EXPECT_EQ(count(r.output, "] all 8 ranks passed the check"), 1) << r.output;
  EXPECT_NE(r.output.find("[rank 0/8] all 8 ranks passed the check"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(port chosen by the OS)"), std::string::npos) << r.output;
}

TEST(Spawn, SimulatedNodesGiveNodeAndLocalRanks) {
  auto r = run_one(spawn({"--nnodes", "2", "--nproc-per-node", "3"}), 90);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (int k = 0; k < 6; ++k) {
    const std::string line = "[rank " + std::to_string(k) + "/6] node " + std::to_string(k / 3) + ", local rank " +
                             std::to_string(k % 3) + ": Rank " + std::to_string(k) + " has joined";
    EXPECT_EQ(count(r.output, line), 1) << line << "\n" << r.output;
  }
  EXPECT_EQ(count(r.output, "= 15, n(n-1)/2 = 15: OK"), 6) << r.output;
}

TEST(Spawn, ExecModeRunsAProgramAsEachWorker) {
  // 02_spawn ... -- PROGRAM: like torchrun --no-python, the rank arrives in the environment and
  // rank 0 joins the launcher's store (TORCHELASTIC_USE_AGENT_STORE) instead of hosting one.
  auto r = run_one(spawn({"--nnodes", "1", "--nproc-per-node", "3", "--", bin("01_join_group"), "--timeout", "5"}), 90);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (int k = 0; k < 3; ++k) EXPECT_EQ(count(r.output, "Rank " + std::to_string(k) + " has joined"), 1) << r.output;
  EXPECT_EQ(count(r.output, "= 3, n(n-1)/2 = 3: OK"), 3) << r.output;
}

TEST(Spawn, ThreeRunsAtOnceDoNotClash) {
  auto rs = run_all({spawn({"--world-size", "2"}), spawn({"--world-size", "2"}), spawn({"--world-size", "2"})}, 90);
  for (auto& r : rs) EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST(SpawnFailure, ExitingWorkerIsNamedFirstAndTheOthersAreStopped) {
  auto r = run_one(spawn({"--world-size", "4", "--fail-rank", "2", "--fail-mode", "exit"}), 60);
  ASSERT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.exit_code, 3) << r.output;  // the first failure's own exit code
  EXPECT_NE(r.output.find("first: rank 2\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("injected fault: exit code 3"), std::string::npos) << r.output;
  // The table has one row per rank; rank 2's row carries the mark.
  EXPECT_NE(r.output.find("  2   * 0     2"), std::string::npos) << r.output;
  for (int k : {0, 1, 3}) EXPECT_NE(r.output.find("\n  " + std::to_string(k) + "     0     "), std::string::npos) << r.output;
}

TEST(SpawnFailure, KilledWorkerIsReportedBySignal) {
  auto r = run_one(spawn({"--nnodes", "2", "--nproc-per-node", "2", "--fail-rank", "3", "--fail-mode", "kill"}), 60);
  ASSERT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.exit_code, 128 + SIGKILL) << r.output;
  EXPECT_NE(r.output.find("first: rank 3\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("  3   * 1     1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("signal 9 (Killed)"), std::string::npos) << r.output;
}

TEST(SpawnFailure, PeersOfAKilledWorkerFailOnTheirOwn) {
  // With --on-failure wait the launcher does not stop anyone: the survivors must notice the
  // dead peer themselves (Gloo: connection reset) and exit non-zero, well before --timeout.
  auto r = run_one(spawn({"--world-size", "4", "--fail-rank", "1", "--fail-mode", "kill", "--on-failure", "wait",
                          "--timeout", "20"}),
                   60);
  ASSERT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.exit_code, 128 + SIGKILL) << r.output;
  EXPECT_NE(r.output.find("4 of 4 workers failed; first: rank 1\n"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("stopped by launcher"), std::string::npos) << r.output;
  EXPECT_EQ(count(r.output, "[a peer rank exited during this operation"), 3 * 2) << r.output;  // log line + table cell
  EXPECT_LT(r.seconds, 10) << "peers waited for the timeout instead of noticing the dead rank\n" << r.output;
}

TEST(SpawnFailure, HangingWorkerMakesThePeersTimeOutAndIsStopped) {
  // Rank 1 stays alive but never enters the all-reduce: the peers' collective times out
  // after --timeout, they fail, and the launcher stops rank 1.
  auto r = run_one(spawn({"--world-size", "3", "--fail-rank", "1", "--fail-mode", "hang", "--timeout", "2"}), 60);
  ASSERT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("stopped by launcher"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("did not take part within --timeout"), std::string::npos) << r.output;
  EXPECT_LT(r.seconds, 20) << r.output;
}

TEST(SpawnFailure, SigtermToTheLauncherReachesTheWorkers) {
  // A hung rank keeps the run alive; SIGTERM to the launcher must end every worker.
  ProcSpec s = spawn({"--world-size", "2", "--fail-rank", "0", "--fail-mode", "hang", "--timeout", "30"});
  s.signal = SIGTERM;
  s.signal_after_s = 2;
  s.signal_once_printed = "[launcher] starting 2 workers";  // its signals blocked, its workers forked
  auto r = run_one(s, 60);
  ASSERT_FALSE(r.timed_out) << r.output;
  EXPECT_NE(r.output.find("received Terminated, passing it on to the workers"), std::string::npos) << r.output;
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.output;
  EXPECT_LT(r.seconds, 15) << r.output;
  // Both workers ended by the forwarded signal, within the grace period.
  EXPECT_EQ(count(r.output, "signal 15 (Terminated)"), 2) << r.output;
}

TEST(SpawnFailure, ExecModeCausesComeFromTheWorkersErrorFiles) {
  // The program's own error reaches the table through TORCHELASTIC_ERROR_FILE. Both workers fail
  // by themselves at about the same instant: --on-failure wait, so that the launcher's SIGTERM to
  // the second one cannot cut its failure short (with "stop", whether its line is printed is a race).
  auto r = run_one(spawn({"--world-size", "2", "--on-failure", "wait", "--", bin("01_join_group"), "--world-size", "3", "--timeout",
                          "1.5"}),
                   60);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  // Once in each rank's own error line, once more in each row of the table.
  EXPECT_EQ(count(r.output, "rank 2 never joined within 1.5s (world size 3; present: 0, 1)"), 4) << r.output;
  auto missing = run_one(spawn({"--world-size", "2", "--on-failure", "wait", "--", "/nonexistent/program"}), 30);
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_EQ(count(missing.output, "cannot start '/nonexistent/program': No such file or directory"), 4) << missing.output;
}

TEST(SpawnFailure, BadPlansAreRefusedWithExit2) {
  for (auto args : std::vector<std::vector<std::string>>{{"--world-size", "5", "--nnodes", "2"},
                                                         {"--nnodes", "0"},
                                                         {"--world-size", "2", "--fail-rank", "2"},
                                                         {"--fail-mode", "explode"},
                                                         {"--rank", "1"},
                                                         // more ranks than GPUs: none on a CPU host, one too many on a GPU host
                                                         {"--backend", "nccl", "--world-size", std::to_string(gpu_count() + 1)}}) {
    auto r = run_one(spawn(args), 20);
    EXPECT_EQ(r.exit_code, 2) << args[0] << "\n" << r.output;
  }
}

// A --master-port (or MASTER_PORT) that another process listens on is refused before anything is
// forked, exit 2, naming the port, where it came from, and the fix (Note [A port given by hand] in
// 02_spawn/busy_port.cpp). Before, the workers were forked first and the run ended with "4 of 4
// workers failed", each cause "the launcher did not send the store's port".
TEST(SpawnFailure, BusyMasterPortIsRefusedBeforeAnyWorkerStarts) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(fd, 4), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const std::string port = std::to_string(ntohs(a.sin_port));
  ProcSpec by_flag = spawn({"--world-size", "4", "--master-port", port});
  ProcSpec by_env = spawn({"--world-size", "4"});
  by_env.env["MASTER_PORT"] = port;
  for (const auto& [spec, source] : std::vector<std::pair<ProcSpec, std::string>>{{by_flag, "--master-port"}, {by_env, "env MASTER_PORT"}}) {
    auto r = run_one(spec, 20);
    ASSERT_FALSE(r.timed_out) << r.output;
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("port " + port + " (" + source + ") cannot host the launcher's store: Address already in use"),
              std::string::npos) << r.output;
    EXPECT_NE(r.output.find("Leave --master-port and MASTER_PORT unset to let the OS pick a free port, or pick another one"),
              std::string::npos) << r.output;
    EXPECT_NE(r.output.find(" (free right now)"), std::string::npos) << r.output;  // a port to use, as rank 0's own refusal gives
    EXPECT_EQ(r.output.find("starting 4 workers"), std::string::npos) << r.output;  // nothing was forked
    EXPECT_EQ(r.output.find("workers failed"), std::string::npos) << r.output;
    EXPECT_LT(r.seconds, 10) << r.output;
  }
  ::close(fd);
}

// Note [Choosing the backend] end to end, with the GPU count injected (this host has none):
// a one-GPU laptop running two ranks trains on Gloo and says why once per host; with a GPU per
// local rank the ranks take NCCL, which here (no real GPU) is refused before joining.
TEST(Spawn, TheDefaultBackendFollowsTheGpusOfTheHost) {
  for (auto args : std::vector<std::vector<std::string>>{{"--world-size", "2"},  // the built-in worker
                                                         {"--world-size", "2", "--", bin("01_join_group")}}) {
    ProcSpec one_gpu = spawn(args);
    one_gpu.env["DDP_GPU_COUNT"] = "1";
    auto r = run_one(one_gpu, 60);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(count(r.output, "backend gloo on the CPU: host "), 1) << r.output;  // local rank 0 only
    EXPECT_EQ(count(r.output, "has 1 GPU (env DDP_GPU_COUNT) for 2 local ranks, and NCCL needs one GPU per rank"), 1)
        << r.output;
    EXPECT_EQ(count(r.output, "all-reduce(SUM) of the ranks = 1, n(n-1)/2 = 1: OK"), 2) << r.output;

    // NCCL chosen, and refused on a host without a GPU. (On a GPU host the refusal, or the run,
    // depends on its real GPUs: the choice itself is checked by --explain-env below.)
    if (gpu_host()) continue;
    ProcSpec two_gpus = spawn(args);
    two_gpus.env["DDP_GPU_COUNT"] = "2";
    r = run_one(two_gpus, 60);
    EXPECT_EQ(r.exit_code, 2) << r.output;
#ifdef DDP_HAS_NCCL
    // No --backend was given: the refusal names the default it refuses, not a flag.
    EXPECT_NE(r.output.find("backend nccl (default: 2 GPUs (env DDP_GPU_COUNT) for 2 local ranks, one GPU each) needs a CUDA GPU, and none is visible"),
              std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("--backend nccl"), std::string::npos) << r.output;
#else
    EXPECT_NE(r.output.find("was built without NCCL (a CPU build)"), std::string::npos) << r.output;
#endif
  }
  // Two nodes simulated on a one-GPU host share that GPU: Gloo, said once per simulated node.
  ProcSpec two_nodes = spawn({"--nnodes", "2", "--nproc-per-node", "1"});
  two_nodes.env["DDP_GPU_COUNT"] = "1";
  auto sim = run_one(two_nodes, 60);
  EXPECT_EQ(sim.exit_code, 0) << sim.output;
  EXPECT_EQ(count(sim.output, "for 2 local ranks (2 simulated nodes), and NCCL needs one GPU per rank"), 2) << sim.output;
  // --explain-env shows the choice and its reason.
  ProcSpec explain{{"01_join_group", "--explain-env"},
                   {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_WORLD_SIZE", "2"}, {"DDP_GPU_COUNT", "2"}}};
  auto r = run_one(explain, 30);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("backend          = nccl   <- default: 2 GPUs (env DDP_GPU_COUNT) for 2 local ranks, one GPU each"),
            std::string::npos) << r.output;
  explain.env["DDP_GPU_COUNT"] = "0";
  r = run_one(explain, 30);
  EXPECT_NE(r.output.find("backend          = gloo   <- default: no GPU (env DDP_GPU_COUNT)"), std::string::npos) << r.output;
}

// torchrun's --max-restarts: a worker fails, every worker is stopped, and all start again with a
// fresh store; the injected fault fires in the first attempt only, so the second one passes.
TEST(SpawnRestart, AFailedAttemptRestartsAllWorkersAndTheRunFinishes) {
  auto r = run_one(spawn({"--world-size", "3", "--fail-rank", "1", "--fail-mode", "kill", "--max-restarts", "2"}), 90);
  ASSERT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count(r.output, "[launcher] starting 3 workers (1 node(s) x 3 per node, attempt 1 of at most 3)"), 1) << r.output;
  EXPECT_EQ(count(r.output, "[launcher] starting 3 workers (1 node(s) x 3 per node, attempt 2 of at most 3)"), 1) << r.output;
  // The first attempt's report stays: rank 1 killed, the others stopped by the launcher.
  EXPECT_NE(r.output.find("first: rank 1\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("attempt 1 failed (exit 137): restarting all 3 workers (restart 1 of 2)"), std::string::npos) << r.output;
  EXPECT_EQ(count(r.output, "= 3, n(n-1)/2 = 3: OK"), 3) << r.output;  // the second attempt, every rank
  EXPECT_EQ(count(r.output, "attempt 3"), 0) << r.output;
}

// A failure that a restart does not cure: every attempt fails, each report is printed, and the
// exit code is the last attempt's. The attempt number reaches a program in its environment.
TEST(SpawnRestart, WhenEveryAttemptFailsTheLastAttemptsExitCodeIsReturned) {
  auto r = run_one(spawn({"--world-size", "2", "--max-restarts", "2", "--on-failure", "wait", "--", "/bin/sh", "-c",
                          "echo attempt=$TORCHELASTIC_RESTART_COUNT rank=$RANK; exit $((4 + TORCHELASTIC_RESTART_COUNT))"}),
                   60);
  ASSERT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.exit_code, 6) << r.output;
  for (int a : {0, 1, 2}) EXPECT_EQ(count(r.output, "attempt=" + std::to_string(a) + " rank="), 2) << r.output;
  EXPECT_EQ(count(r.output, "workers failed; first: rank"), 3) << r.output;
  EXPECT_NE(r.output.find("no restarts left (--max-restarts 2)"), std::string::npos) << r.output;
  auto bad = run_one(spawn({"--world-size", "2", "--max-restarts", "-1"}), 30);
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
}
