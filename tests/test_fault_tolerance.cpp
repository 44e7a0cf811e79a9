// Chapter 08 as real processes: a lighthouse and replicas, killed and stopped on purpose. Each run
// ends with the launcher's own checks (the step logs agree and their samples follow each other, every
// replica that finished holds the same parameters, a single-process replay of the membership
// schedule gives them); these tests hold what the runs print to what the faults must do.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "proc.h"

using namespace ddp_test;

namespace {

ProcResult chapter08(const std::vector<std::string>& args, double deadline_s = 90) {
  return run_one({plus({"08_fault_tolerance"}, args)}, deadline_s);
}

// The checks every launcher run ends with: all three OK, none FAILED.
void expect_checked(const ProcResult& r) {
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count(r.output, "[launcher] check: "), 3) << r.output;
  EXPECT_EQ(count(r.output, ": OK\n"), 3) << r.output;
  EXPECT_EQ(count(r.output, "FAILED"), 0) << r.output;
}

std::string final_fingerprint(const std::string& output) {
  std::smatch m;
  const std::regex re("all with params fingerprint ([0-9a-f]{16})");
  return std::regex_search(output, m, re) ? m[1].str() : "";
}

}  // namespace

// Without a fault, 08's replicas compute chapter 03's step: the same data slices, the same Gloo
// all-reduce (SUM) and division, SGD's update: the same bits at 2 and at 3 (Note [Zeros until
// healed, and a vote]). And the replay is exact at 2 contributors.
TEST(FaultTolerance, WithoutAFaultItIsChapter03BitForBit) {
  const std::string dir = temp_dir();
  for (int n : {2, 3}) {
    ProcResult ours = chapter08({"--replicas", std::to_string(n), "--out", dir + "/n" + std::to_string(n)});
    expect_checked(ours);
    ProcResult theirs = run_one({{"02_spawn", "--nproc-per-node", std::to_string(n), "--", bin("03_manual_allreduce")}}, 60);
    ASSERT_EQ(theirs.exit_code, 0) << theirs.output;
    const std::set<std::string> fp = fingerprints(theirs.output);
    ASSERT_EQ(fp.size(), 1u) << theirs.output;
    EXPECT_EQ(final_fingerprint(ours.output), *fp.begin()) << ours.output;
    if (n == 2) EXPECT_NE(ours.output.find("bit-identical to the replicas'"), std::string::npos) << ours.output;
  }
}

// A replica SIGKILLed in forward, inside the all-reduce (after its first gradient), and between
// the vote and the optimizer step: the survivors never restart (each replica prints "done" once),
// the replacement heals from a survivor, and with momentum the healed optimizer state must be the
// donor's, or the replicas' fingerprints would part after it.
TEST(FaultTolerance, AReplicaKilledInForwardAllReduceOrAfterTheVoteIsTrainedThrough) {
  const std::string dir = temp_dir();
  for (const std::string where : {"forward", "allreduce", "vote"}) {
    SCOPED_TRACE(where);
    // 100 steps of 50 ms: the replacement, started at once, finds the run going (a second of
    // LibTorch's start, more on a loaded machine, against 4.6 s of steps left).
    ProcResult r = chapter08({"--replicas", "3", "--contributors", "2", "--momentum", "0.9", "--inject", "r1:" + where + "@8",
                              "--replace-after", "0", "--steps", "100", "--step-ms", "50", "--out", dir + "/" + where});
    expect_checked(r);
    EXPECT_EQ(count(r.output, "r1 was killed"), 1) << r.output;
    EXPECT_EQ(count(r.output, "[replica r3] quorum"), 1) << r.output;
    EXPECT_NE(r.output.find("healing from r"), std::string::npos) << r.output;
    EXPECT_EQ(count(r.output, "] done: 100 steps"), 3) << r.output;  // r0, r2 and r3; r1 never restarted
    EXPECT_NE(r.output.find("4 replicas ran, 1 lost, 0 failed"), std::string::npos) << r.output;
    // Killed before its vote, the step fails everywhere and is retried; after it, it commits.
    EXPECT_EQ(count(r.output, "step 8 failed"), where == "vote" ? 0 : 2) << r.output;
    // A killed process's connection to the lighthouse closes: lost at once, no heartbeat timeout
    // (1 s) waited, so the quorum forms well within it (Note [The lighthouse on a store]).
    if (where != "vote") {
      std::smatch m;
      ASSERT_TRUE(std::regex_search(r.output, m, std::regex("recovered: step 8 committed [0-9.]+s after the failure \\(quorum ([0-9.]+)s")))
          << r.output;
      EXPECT_LT(std::stod(m[1]), 0.5) << r.output;
    }
    // 2 contributors a step throughout (spares keep the global batch): the replay is exact.
    EXPECT_NE(r.output.find("bit-identical to the replicas'"), std::string::npos) << r.output;
  }
}

// SIGSTOP: the process is alive and silent, so nothing fails at once: the survivors' all-reduce
// waits for --timeout (the cost of Gloo having no abort), then the step fails and a quorum forms.
TEST(FaultTolerance, AStoppedReplicaIsFoundAtTheTimeoutAndLeftBehind) {
  ProcResult r = chapter08({"--replicas", "2", "--inject", "r1:stop@5", "--timeout", "1", "--out", temp_dir() + "/run"});
  expect_checked(r);
  EXPECT_NE(r.output.find("r1 stopped (SIGSTOP)"), std::string::npos) << r.output;
  std::smatch m;
  const std::regex breakdown("to the next committed step on r0: [0-9.e-]+s = detection ([0-9.e-]+)s");
  ASSERT_TRUE(std::regex_search(r.output, m, breakdown)) << r.output;
  EXPECT_GE(std::stod(m[1]), 0.9) << r.output;  // found by the timeout, not before
  EXPECT_LT(std::stod(m[1]), 5) << r.output;
  EXPECT_EQ(count(r.output, "] done: 20 steps"), 1) << r.output;
}

// The lighthouse killed mid-run: the replicas say so, wait, and go on when it is back; gone for
// longer than --quorum-deadline, they exit 1 naming it. Nothing is left running either way
// (run_one would time out on a process left holding the output).
TEST(FaultTolerance, ALostLighthouseIsWaitedForThenGivenUpOnByName) {
  const std::string dir = temp_dir();
  ProcResult back = chapter08({"--replicas", "2", "--steps", "400", "--lighthouse-down", "5:1", "--out", dir + "/back"});
  expect_checked(back);
  EXPECT_EQ(count(back.output, "does not answer"), 2) << back.output;
  EXPECT_EQ(count(back.output, "is back: a new quorum"), 2) << back.output;
  ProcResult gone = chapter08({"--replicas", "2", "--steps", "400", "--lighthouse-down", "5:100", "--quorum-deadline", "2",
                               "--out", dir + "/gone"});
  EXPECT_EQ(gone.exit_code, 1) << gone.output;
  EXPECT_EQ(count(gone.output, "did not come back within 2s (--quorum-deadline)"), 2) << gone.output;
}

// Bad input exits 2 with why: a lighthouse that does not answer, one of another run, an id that
// already ran, flags that do not parse.
TEST(FaultTolerance, BadInputExits2WithWhy) {
  const std::string dir = temp_dir();
  const std::string port = std::to_string(free_port());
  auto replica = [&](std::vector<std::string> extra) {
    return run_one({plus({"08_fault_tolerance", "--replica-id", "r0", "--quorum-deadline", "1", "--out", dir + "/run"}, extra)}, 30);
  };
  ProcResult none = replica({"--lighthouse", "127.0.0.1:" + port});
  EXPECT_EQ(none.exit_code, 2) << none.output;
  EXPECT_NE(none.output.find("no lighthouse answers at 127.0.0.1:" + port), std::string::npos) << none.output;
  // A lighthouse of run 'a', a replica of run 'b'.
  ProcSpec lighthouse{{"08_fault_tolerance", "--lighthouse-only", "--port", port, "--run", "a", "--serve-for", "4"}};
  ProcSpec stranger{{"08_fault_tolerance", "--replica-id", "r9", "--run", "b", "--lighthouse", "127.0.0.1:" + port,
                     "--out", dir + "/b"}};
  stranger.start_delay_s = 1;
  ProcSpec group = stranger;  // a replica group of two: its forker ends as its ranks did, exit 2, nothing left running
  group.argv = plus(group.argv, {"--replica-id", "r8", "--out", dir + "/b2", "--ranks-per-replica", "2"});
  std::vector<ProcResult> both = run_all({lighthouse, stranger, group}, 30);
  for (int k : {1, 2}) {
    EXPECT_EQ(both[k].exit_code, 2) << both[k].output;
    EXPECT_NE(both[k].output.find("serves run 'a', not 'b'"), std::string::npos) << both[k].output;
  }
  // The id r0 already ran in dir/run (the first attempt created its step log).
  ProcResult again = replica({"--lighthouse", "127.0.0.1:" + port});
  EXPECT_EQ(again.exit_code, 2) << again.output;
  EXPECT_NE(again.output.find("already ran in this run"), std::string::npos) << again.output;
  for (const std::vector<std::string>& bad : std::vector<std::vector<std::string>>{
           {"--lighthouse", "nohost"}, {"--fault", "sideways@3", "--lighthouse", "127.0.0.1:1"}, {"--fault", "forward@x"},
           {"--ranks-per-replica", "0"}, {"--ranks-per-replica", "9"}}) {
    ProcResult r = run_one({plus({"08_fault_tolerance", "--replica-id", "rx", "--out", temp_dir()}, bad)}, 30);
    EXPECT_EQ(r.exit_code, 2) << r.output;
  }
  ProcResult no_out = chapter08({"--check"});
  EXPECT_EQ(no_out.exit_code, 2) << no_out.output;
  EXPECT_NE(no_out.output.find("--check: say which run's folder to check (--out)"), std::string::npos) << no_out.output;
  ProcResult no_run = chapter08({"--check", "--out", dir + "/none"});
  EXPECT_EQ(no_run.exit_code, 2) << no_run.output;
  EXPECT_NE(no_run.output.find("--check: no run folder " + dir + "/none"), std::string::npos) << no_run.output;
  // A lighthouse --until-done to which no replica ever comes stops after --quorum-deadline, exit 1.
  ProcResult alone = chapter08({"--lighthouse-only", "--port", std::to_string(free_port()), "--until-done", "--quorum-deadline", "1"}, 30);
  EXPECT_EQ(alone.exit_code, 1) << alone.output;
  EXPECT_NE(alone.output.find("no replica for 1s (--quorum-deadline), and the run has not ended: stopped"), std::string::npos) << alone.output;
  ProcResult outer = chapter08({"--replicas", "2", "--outer-lr", "0.7"});  // DiLoCo's outer step needs a sync to step on
  EXPECT_EQ(outer.exit_code, 2) << outer.output;
  EXPECT_NE(outer.output.find("it needs --sync-every H"), std::string::npos) << outer.output;
  ProcResult inject = chapter08({"--replicas", "2", "--inject", "r7:forward@1"});
  EXPECT_EQ(inject.exit_code, 2) << inject.output;
  EXPECT_NE(inject.output.find("ID one of r0..r1"), std::string::npos) << inject.output;
}

// torchft itself (0.2.0, in the cuda flavour's virtualenv, which scripts/setup.sh cuda makes): its
// lighthouse, Manager, DDP and Optimizer on the same task from the same initial parameters, with
// the data position kept as 08 keeps it (tests/torchft_reference.py). Two replicas, momentum 0.9:
// without a fault, and with replica 1 gone at the start of step 8, before it asks for that step's
// quorum, on both sides (08's --fault quorum@8): replica 0 trains on alone. Both sum, then divide
// by the participants; at 2 the sum is a+b in any order, so the bits must agree.
TEST(FaultTolerance, TorchftComputesTheSameBitsWithAndWithoutALostReplica) {
#ifndef DDP_REFERENCE_PYTHON
  GTEST_SKIP() << "no Python with PyTorch configured (DDP_REFERENCE_PYTHON): scripts/build.sh sets it";
#else
  ProcResult has = run_one({{DDP_REFERENCE_PYTHON, "-c", "import torch, sys; sys.exit(int(torch.__version__.split('.')[0]) < 2)"}}, 60);
  if (has.exit_code != 0) GTEST_SKIP() << "the reference Python's PyTorch is 1.x: torchft needs 2.7 or later (the cuda flavour has it)";
  ProcResult ft = run_one({{DDP_REFERENCE_PYTHON, "-c", "import torchft"}}, 60);
  ASSERT_EQ(ft.exit_code, 0) << "torchft is not installed beside the reference PyTorch (scripts/setup.sh cuda installs it): " << ft.output;
  const std::string dir = temp_dir();
  for (const std::string kill : {"-1", "8"}) {
    SCOPED_TRACE("kill at " + kill);
    const std::string run = dir + "/kill" + kill;
    std::vector<std::string> args{"--replicas", "2", "--momentum", "0.9", "--save-init", run + ".init.pt", "--out", run};
    if (kill != "-1") args.insert(args.end(), {"--inject", "r1:quorum@" + kill});
    ProcResult ours = chapter08(args);
    expect_checked(ours);
    ProcResult theirs = run_one({{DDP_REFERENCE_PYTHON, std::string(DDP_SOURCE_DIR) + "/tests/torchft_reference.py", "--init",
                                  run + ".init.pt", "--compare", run + "/params.r0.pt", "--momentum", "0.9", "--kill-at", kill,
                                  "--heartbeat-timeout-ms", "1000", "--tolerance", "0"}},
                                120);
    EXPECT_EQ(theirs.exit_code, 0) << theirs.output;
    EXPECT_NE(theirs.output.find("bit-identical: yes"), std::string::npos) << theirs.output;
  }
#endif
}

// Local SGD (Note [Local SGD]): PyTorch's PostLocalSGDOptimizer with a PeriodicModelAverager,
// each flavour's own (tests/local_sgd_reference.py), at 2 and 3 replicas, every replica's
// parameters bit for bit; and a quarter of DDP's bytes at --sync-every 4 (5 averages of the
// parameters in 20 steps: after steps 0, 4, 8, 12, 16, as PeriodicModelAverager counts).
TEST(FaultTolerance, LocalSgdIsPostLocalSgdOptimizerBitForBit) {
#ifndef DDP_REFERENCE_PYTHON
  GTEST_SKIP() << "no Python with PyTorch configured (DDP_REFERENCE_PYTHON): scripts/build.sh sets it";
#else
  const std::string dir = temp_dir();
  for (int n : {2, 3}) {
    const std::string run = dir + "/n" + std::to_string(n);
    ProcResult ours = chapter08({"--replicas", std::to_string(n), "--sync-every", "4", "--momentum", "0.9", "--save-init",
                                 run + ".init.pt", "--out", run});
    EXPECT_EQ(ours.exit_code, 0) << ours.output;
    EXPECT_EQ(count(ours.output, "[launcher] check: "), 2) << ours.output;
    EXPECT_EQ(count(ours.output, "FAILED"), 0) << ours.output;
    EXPECT_EQ(count(ours.output, "all-reduced 3220 bytes of parameters in 5 averages"), n) << ours.output;  // 5 x 161 x 4
    ProcResult theirs = run_one({{DDP_REFERENCE_PYTHON, std::string(DDP_SOURCE_DIR) + "/tests/local_sgd_reference.py", "--init",
                                  run + ".init.pt", "--compare-dir", run, "--world-size", std::to_string(n), "--sync-every", "4",
                                  "--momentum", "0.9", "--tolerance", "0"}},
                                120);
    EXPECT_EQ(theirs.exit_code, 0) << theirs.output;
    EXPECT_EQ(count(theirs.output, "bit-identical: yes"), n) << theirs.output;
  }
  ProcResult ddp = chapter08({"--replicas", "2", "--out", dir + "/ddp"});
  EXPECT_EQ(count(ddp.output, "all-reduced 12880 bytes of gradients in 20 averages"), 2) << ddp.output;  // 20 x 161 x 4
#endif
}

// Local SGD through a lost replica: the survivors' next average fails, each keeps its own
// parameters, and the replacement heals in; every replica that finished equals a replay of its own
// steps, heals and averages, bit for bit (2 contributors a step).
TEST(FaultTolerance, LocalSgdSurvivesALostReplicaAndHealsIn) {
  const std::string run = temp_dir() + "/run";
  ProcResult r = chapter08({"--replicas", "2", "--sync-every", "4", "--momentum", "0.9", "--inject", "r1:forward@8", "--replace-after",
                            "0", "--steps", "100", "--step-ms", "40", "--out", run});
  std::ifstream log(run + "/steps.r0.txt");
  const std::string steps((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(steps.find("step 8 position 128 batch 8 contributors r0,r1 quorum 1 average failed\n"), std::string::npos) << steps;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("step 8: the average failed"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[replica r1] fault: SIGKILL to myself in forward of step 8"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[replica r2] quorum"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("healing from r0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("each equal to a single-process replay of its own steps and the averages (local SGD): bit-identical"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(count(r.output, "FAILED"), 0) << r.output;
}

// DiLoCo (Note [DiLoCo]) against torchft's own DiLoCo (tests/torchft_reference.py --sync-every):
// its Manager with a synchronous quorum, a plain SGD inner optimizer with momentum 0.9, an outer
// SGD at lr 0.7 with Nesterov momentum 0.9, syncs after steps 3, 7, 11, 15, 19. Two replicas, no
// fault; both replicas' parameters bit for bit. torchft needs torch >= 2.7: the cuda build runs it.
TEST(FaultTolerance, DilocoIsTorchftsDilocoBitForBit) {
#ifndef DDP_REFERENCE_PYTHON
  GTEST_SKIP() << "no Python with PyTorch configured (DDP_REFERENCE_PYTHON): scripts/build.sh sets it";
#else
  ProcResult has = run_one({{DDP_REFERENCE_PYTHON, "-c", "import torch, sys; sys.exit(int(torch.__version__.split('.')[0]) < 2)"}}, 60);
  if (has.exit_code != 0) GTEST_SKIP() << "the reference Python's PyTorch is 1.x: torchft needs 2.7 or later (the cuda flavour has it)";
  const std::string run = temp_dir() + "/diloco";
  ProcResult ours = chapter08({"--replicas", "2", "--sync-every", "4", "--outer-lr", "0.7", "--momentum", "0.9", "--save-init",
                               run + ".init.pt", "--out", run});
  EXPECT_EQ(ours.exit_code, 0) << ours.output;
  EXPECT_EQ(count(ours.output, "all-reduced 3220 bytes of pseudo-gradients in 5 averages"), 2) << ours.output;  // 5 x 161 x 4
  EXPECT_NE(ours.output.find("(DiLoCo): bit-identical"), std::string::npos) << ours.output;
  ProcResult theirs = run_one({{DDP_REFERENCE_PYTHON, std::string(DDP_SOURCE_DIR) + "/tests/torchft_reference.py", "--init",
                                run + ".init.pt", "--compare", run + "/params.r0.pt", "--momentum", "0.9", "--sync-every", "4",
                                "--outer-lr", "0.7", "--outer-momentum", "0.9", "--tolerance", "0"}},
                              120);
  EXPECT_EQ(theirs.exit_code, 0) << theirs.output;
  EXPECT_NE(theirs.output.find("torchft: DiLoCo committed 5 and 5 syncs in 20 steps"), std::string::npos) << theirs.output;
  EXPECT_EQ(count(theirs.output, "bit-identical: yes"), 2) << theirs.output;
#endif
}

// DiLoCo through a lost replica: r1 dies inside step 7's sync, after its all-reduce (the fault
// point `allreduce` of a sync), so the survivors' vote fails and every survivor throws away its
// inner steps since the last sync (back to the
// global parameters, "average discarded" in the step log); the replacement heals in, global
// parameters and outer optimizer included; every replica that finished equals a replay of its
// own steps, heals and syncs, bit for bit.
TEST(FaultTolerance, DilocoDiscardsAFailedSyncAndHealsIn) {
  const std::string run = temp_dir() + "/run";
  ProcResult r = chapter08({"--replicas", "2", "--sync-every", "4", "--outer-lr", "0.7", "--momentum", "0.9", "--inject", "r1:allreduce@7",
                            "--replace-after", "0", "--steps", "100", "--step-ms", "40", "--out", run});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[replica r1] fault: SIGKILL to myself in allreduce of step 7"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("step 7: the average failed, back to the global parameters"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("healing from r0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(DiLoCo): bit-identical"), std::string::npos) << r.output;
  EXPECT_EQ(count(r.output, "FAILED"), 0) << r.output;
  std::ifstream log(run + "/steps.r0.txt");
  const std::string steps((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(steps.find(" average discarded\n"), std::string::npos) << steps;
  EXPECT_GE(count(steps, " average pseudo-gradients\n"), 20) << steps;  // syncs after steps 3, 7, ..., 99, less the failed one
}

// Replica groups of two ranks (Note [A replica group of several ranks]): 05's DDP inside each
// group, the quorum across groups, one cross-group group per local rank. A rank SIGKILLed inside
// the all-reduce takes its whole group with it (its forker kills the other rank and ends as
// killed), the survivors' two ranks fail the step together and go on alone; the replacement's two
// ranks each heal from the donor's rank of the same local rank. A stopped rank is found by its own
// group's DDP timeout. Two groups: at most 2 contributors of 2 ranks a step, so the replay, which
// averages each contributor's 2 batches as DDP does (times 1/2, summed), is exact. Under local SGD
// the same, each replica against its own replay.
TEST(FaultTolerance, ReplicaGroupsOfTwoRanksAreLostWholeAndHealRankByRank) {
  const std::string dir = temp_dir();
  // --timeout 10 where a kill is tested: found at once (its sockets close), while a rank stalled by
  // a loaded machine is not taken for lost.
  ProcResult r = chapter08({"--replicas", "2", "--ranks-per-replica", "2", "--momentum", "0.9", "--inject", "r1:allreduce@6",
                            "--replace-after", "0", "--steps", "60", "--step-ms", "40", "--timeout", "10", "--out", dir + "/grad"});
  expect_checked(r);
  EXPECT_EQ(count(r.output, "[replica r1.1] fault: SIGKILL to myself in allreduce of step 6"), 1) << r.output;
  EXPECT_EQ(count(r.output, "[replica r1] its rank r1.1 was killed (Killed): the whole replica is lost"), 1) << r.output;
  EXPECT_EQ(count(r.output, "r1 was killed"), 1) << r.output;
  EXPECT_EQ(count(r.output, "step 6 failed"), 2) << r.output;  // r0's two ranks, together
  for (const std::string k : {"0", "1"})  // each rank of the replacement, from r0's rank of its own local rank
    EXPECT_TRUE(std::regex_search(r.output, std::regex("\\[replica r2\\." + k + "\\] quorum [0-9]+: r0 r2, rank 1 of 2, a new group; healing from r0")))
        << r.output;
  EXPECT_EQ(count(r.output, "] done: 60 steps"), 4) << r.output;  // r0's and r2's ranks; r1 never restarted
  std::set<std::string> ranks_fingerprints;  // every rank of every group that finished, the healed ones too
  const std::regex done("\\] done: 60 steps, params fingerprint ([0-9a-f]{16})");
  for (auto it = std::sregex_iterator(r.output.begin(), r.output.end(), done); it != std::sregex_iterator(); ++it)
    ranks_fingerprints.insert((*it)[1].str());
  EXPECT_EQ(ranks_fingerprints.size(), 1u) << r.output;
  EXPECT_NE(r.output.find("3 replicas ran, 1 lost, 0 failed"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("bit-identical to the replicas'"), std::string::npos) << r.output;
  std::ifstream log(dir + "/grad/steps.r0.txt");
  const std::string steps((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(steps.find("step 0 position 0 batch 8 contributors r0,r1 quorum 1 average gradients ranks 2\n"), std::string::npos) << steps;
  for (const auto& entry : std::filesystem::directory_iterator(dir + "/grad"))  // each group's own store, removed
    EXPECT_NE(entry.path().filename().string().rfind(".ranks.", 0), 0u) << entry.path();

  ProcResult stop = chapter08({"--replicas", "2", "--ranks-per-replica", "2", "--inject", "r1:stop@5", "--timeout", "1", "--out",
                               dir + "/stop"});
  expect_checked(stop);
  EXPECT_NE(stop.output.find("[replica r1] its rank r1.0 exited with code 1: the whole replica is lost"), std::string::npos) << stop.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(stop.output, m, std::regex("to the next committed step on r0: [0-9.e-]+s = detection ([0-9.e-]+)s")))
      << stop.output;
  EXPECT_GE(std::stod(m[1]), 0.9) << stop.output;  // the group's DDP timeout, then the cross-group one
  EXPECT_EQ(count(stop.output, "] done: 20 steps"), 2) << stop.output;

  ProcResult local = chapter08({"--replicas", "2", "--ranks-per-replica", "2", "--sync-every", "4", "--momentum", "0.9", "--inject",
                                "r1:forward@8", "--replace-after", "0", "--steps", "60", "--step-ms", "40", "--timeout", "10", "--out",
                                dir + "/local"});
  EXPECT_EQ(local.exit_code, 0) << local.output;
  EXPECT_NE(local.output.find("healing from r0"), std::string::npos) << local.output;
  EXPECT_NE(local.output.find("each equal to a single-process replay of its own steps and the averages (local SGD): bit-identical"),
            std::string::npos)
      << local.output;
  EXPECT_EQ(count(local.output, "FAILED"), 0) << local.output;
}
