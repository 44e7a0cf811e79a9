// The course on a GPU host, as a learner stepping up runs it: every chapter passes its own
// check on NCCL and leaves its group without PyTorch's warning; a host with fewer GPUs than
// ranks (the one-GPU laptop) trains on Gloo and says why; the compression hooks run on NCCL;
// the CNN, deterministic by default (Note [Reproducible GPU runs]), gives the same parameters
// twice and after a kill and a resume.
// Without a GPU, or in a CPU build, each test skips and says so.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "proc.h"

using namespace ddp_test;

namespace {

// Why this host cannot run the GPU tests, or "" when it can.
std::string no_gpu_reason() {
#ifndef DDP_HAS_NCCL
  return "a CPU build of LibTorch: the NCCL path is tested by the cuda flavour's build";
#else
  if (!gpu_host()) return "no GPU on this host (/dev/nvidia0): the NCCL path was compiled and linked, not run";
  return "";
#endif
}

#define SKIP_WITHOUT_GPU()                                  \
  if (const std::string why = no_gpu_reason(); !why.empty()) \
  GTEST_SKIP() << why

// A chapter program that counts the GPUs itself (no DDP_GPU_COUNT).
ProcSpec on_gpus(std::vector<std::string> argv) {
  ProcSpec s{std::move(argv)};
  s.real_gpus = true;
  return s;
}

// The warning of a process group never shut down (Note [Leaving the group]).
constexpr const char* kNoShutdown = "destroy_process_group() was not called";

void expect_passed(const ProcResult& r, const std::string& what, int checks) {
  EXPECT_FALSE(r.timed_out) << what << "\n" << r.output;
  EXPECT_EQ(r.exit_code, 0) << what << "\n" << r.output;
  EXPECT_EQ(count(r.output, "FAILED"), 0) << what << "\n" << r.output;
  EXPECT_GE(count(r.output, ": OK"), checks) << what << "\n" << r.output;
  EXPECT_EQ(count(r.output, kNoShutdown), 0) << what << "\n" << r.output;
}

// Chapter 05, small: 4096 images, 64 per rank per step.
std::vector<std::string> trainer(int world, const std::string& out, std::vector<std::string> more) {
  return plus({"05_ddp", "--nproc-per-node", std::to_string(world), "--train-samples", "4096", "--test-samples", "1000",
               "--batch-size", "64", "--log-every", "20", "--timeout", "60", "--out", out},
              more);
}

}  // namespace

TEST(Gpu, EveryChapterPassesItsSelfCheckOnNccl) {
  SKIP_WITHOUT_GPU();
  const int n = gpu_count();  // one rank per GPU
  const std::string world = std::to_string(n), out = temp_dir();
  // 01: ranks started one by one, as from separate terminals.
  const int port = free_port();
  std::vector<ProcSpec> ranks;
  for (int r = 0; r < n; ++r) {
    ranks.push_back(on_gpus({"01_join_group", "--rank", std::to_string(r), "--world-size", world, "--backend", "nccl",
                             "--master-port", std::to_string(port), "--timeout", "30"}));
  }
  for (const auto& r : run_all(ranks, 120)) expect_passed(r, "01_join_group", 1);
  // 02 to 05, started by 02_spawn.
  expect_passed(run_one(on_gpus({"02_spawn", "--world-size", world, "--backend", "nccl", "--timeout", "30"}), 120), "02_spawn", n);
  expect_passed(run_one(on_gpus({"02_spawn", "--world-size", world, "--timeout", "30", "--", bin("03_manual_allreduce"),
                                 "--backend", "nccl", "--timeout", "30"}),
                        180),
                "03_manual_allreduce", 1);
  expect_passed(run_one(on_gpus({"02_spawn", "--world-size", world, "--timeout", "30", "--", bin("04_grad_hooks"),
                                 "--backend", "nccl", "--comm", "async", "--optimizer", "adam", "--timeout", "30"}),
                        180),
                "04_grad_hooks", 1);
  auto r05 = run_one(on_gpus(trainer(n, out, {"--backend", "nccl", "--max-steps", "60"})), 300);
  expect_passed(r05, "05_ddp", 2);
  EXPECT_NE(r05.output.find("compute: cuda:0"), std::string::npos) << r05.output;
  // Without --backend, a rank per GPU takes NCCL by itself.
  auto explained = run_one(on_gpus({"01_join_group", "--world-size", world, "--explain-env"}), 60);
  EXPECT_NE(explained.output.find("backend          = nccl   <- default: " + world + (n == 1 ? " GPU" : " GPUs") +
                                  " visible to LibTorch"),
            std::string::npos)
      << explained.output;
  std::system(("rm -rf " + out).c_str());
}

// scripts/run.sh's steps on a host with fewer GPUs than ranks: Gloo on the CPU, said once per
// host (node), and the run trains; with simulated nodes too (they share the host's GPUs).
TEST(Gpu, MoreRanksThanGpusTrainOnGlooAndSayWhy) {
  SKIP_WITHOUT_GPU();
  const int n = gpu_count() + 1;
  const std::string out = temp_dir();
  auto r05 = run_one(on_gpus(trainer(n, out, {"--max-steps", "20"})), 300);
  expect_passed(r05, "05_ddp with one rank more than GPUs", 2);
  EXPECT_EQ(count(r05.output, "backend gloo on the CPU: host "), 1) << r05.output;
  EXPECT_NE(r05.output.find("compute: cpu"), std::string::npos) << r05.output;
  auto nodes = run_one(on_gpus({"02_spawn", "--nnodes", std::to_string(n), "--nproc-per-node", "1", "--timeout", "30"}), 120);
  expect_passed(nodes, "02_spawn with a simulated node more than GPUs", n);
  EXPECT_EQ(count(nodes.output, "simulated nodes), and NCCL needs one GPU per rank"), n) << nodes.output;
  std::system(("rm -rf " + out).c_str());
}

// The CNN is where cuDNN would choose non-deterministic kernels: two runs, and a run killed
// after step 36 and resumed from its checkpoint of step 30, all end with the same parameters.
TEST(Gpu, CnnRunsAreBitIdenticalAlsoAfterAKillAndAResume) {
  SKIP_WITHOUT_GPU();
  const int n = gpu_count();
  const std::string a = temp_dir(), b = temp_dir(), c = temp_dir();
  const std::vector<std::string> run = {"--backend", "nccl", "--model", "cnn", "--max-steps", "60", "--ckpt-every", "10"};
  auto first = run_one(on_gpus(trainer(n, a, run)), 300);
  expect_passed(first, "first CNN run", 2);
  auto second = run_one(on_gpus(trainer(n, b, run)), 300);
  expect_passed(second, "second CNN run", 2);
  auto killed = run_one(on_gpus(trainer(n, c, plus(run, {"--kill-rank", "0", "--kill-at-step", "36"}))), 300);
  EXPECT_NE(killed.exit_code, 0) << killed.output;
  EXPECT_NE(killed.output.find("rank 0 failed (signal 9"), std::string::npos) << killed.output;
  auto resumed = run_one(on_gpus(trainer(n, c, run)), 300);
  expect_passed(resumed, "resumed CNN run", 2);
  EXPECT_NE(resumed.output.find("at step 30"), std::string::npos) << resumed.output;
  const auto print = fingerprints(first.output);
  ASSERT_EQ(print.size(), 1u) << first.output;
  EXPECT_EQ(fingerprints(second.output), print) << second.output;
  EXPECT_EQ(fingerprints(resumed.output), print) << resumed.output;
  std::system(("rm -rf " + a + " " + b + " " + c).c_str());
}

// --comm-hook on NCCL (Note [Communication hooks]): the gradients go over the wire as float16
// and bfloat16 (NCCL sums both), the run passes its checks on the GPU, and the rounding shows:
// each hook ends at parameters of its own, none equal to the uncompressed run's.
TEST(Gpu, CompressionHooksTrainOnNccl) {
  SKIP_WITHOUT_GPU();
  const int n = gpu_count();
  std::vector<std::string> prints;
  for (const std::string hook : {"none", "fp16", "bf16"}) {
    const std::string out = temp_dir();
    auto r = run_one(on_gpus(trainer(n, out, {"--backend", "nccl", "--model", "cnn", "--max-steps", "60", "--comm-hook", hook})), 300);
    expect_passed(r, "05_ddp --comm-hook " + hook, 2);
    EXPECT_NE(r.output.find("compute: cuda:0"), std::string::npos) << r.output;
    if (hook != "none") EXPECT_NE(r.output.find("compressed to " + hook + " on the wire"), std::string::npos) << r.output;
    const auto print = fingerprints(r.output);
    ASSERT_EQ(print.size(), 1u) << r.output;
    prints.push_back(*print.begin());
    std::system(("rm -rf " + out).c_str());
  }
  EXPECT_NE(prints[1], prints[0]);
  EXPECT_NE(prints[2], prints[0]);
  EXPECT_NE(prints[2], prints[1]);
}
