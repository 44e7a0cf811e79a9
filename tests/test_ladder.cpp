// The equivalence ladder of chapters 03-04: hand-written averaging == hook-driven averaging
// (bit for bit) == one process on the global batch (within tolerance) == PyTorch's own DDP.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>

#include "proc.h"

using namespace ddp_test;

namespace {

// Runs `chapter` at `world` ranks under 02_spawn; returns the launcher's output.
ProcResult train(const std::string& chapter, int world, std::vector<std::string> args = {}) {
  ProcSpec s{{"02_spawn", "--world-size", std::to_string(world), "--timeout", "20", "--", bin(chapter), "--timeout", "20"}};
  for (auto& a : args) s.argv.push_back(a);
  return run_one(s, 120);
}

// Every rank printed all three checks as passed, and the same fingerprint; returns it.
std::string expect_checks_passed(const ProcResult& r, int world) {
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count(r.output, "check: every rank holds the same parameters: OK"), world) << r.output;
  EXPECT_EQ(count(r.output, "check: single process on the global batch: max |diff| = "), world) << r.output;
  EXPECT_EQ(count(r.output, "<= 1e-05: OK"), world) << r.output;
  EXPECT_EQ(count(r.output, "check: the loss went down: "), world) << r.output;
  EXPECT_EQ(count(r.output, "FAILED"), 0) << r.output;
  const std::set<std::string> prints = fingerprints(r.output);
  EXPECT_EQ(prints.size(), 1u) << r.output;
  return prints.empty() ? "" : *prints.begin();
}

std::string reference_python_skip_reason() {
#ifndef DDP_REFERENCE_PYTHON
  return "no Python with PyTorch configured (DDP_REFERENCE_PYTHON): scripts/build.sh sets it";
#else
  auto r = run_one({{DDP_REFERENCE_PYTHON, "-c", "import torch.distributed"}}, 60);
  if (r.exit_code != 0) return std::string(DDP_REFERENCE_PYTHON) + " cannot import torch: " + r.output;
  return "";
#endif
}

}  // namespace

class Ladder : public ::testing::TestWithParam<int> {};

TEST_P(Ladder, ManualAndHookAveragingAreBitIdenticalAndMatchOneProcess) {
  const int world = GetParam();
  const std::string manual = expect_checks_passed(train("03_manual_allreduce", world), world);
  const std::string hooks_sync = expect_checks_passed(train("04_grad_hooks", world, {"--comm", "sync"}), world);
  const std::string hooks_async = expect_checks_passed(train("04_grad_hooks", world, {"--comm", "async"}), world);
  EXPECT_EQ(manual, hooks_sync);
  EXPECT_EQ(manual, hooks_async);
}

// 3 catches code that assumes a power of two.
INSTANTIATE_TEST_SUITE_P(WorldSize, Ladder, ::testing::Values(1, 2, 3, 4));

TEST(Ladder, StockOptimizersWorkWithHooks) {
  for (int world : {2, 3}) {
    expect_checks_passed(train("04_grad_hooks", world, {"--momentum", "0.9", "--comm", "async"}), world);
    expect_checks_passed(train("04_grad_hooks", world, {"--optimizer", "adam"}), world);
  }
}

TEST(Ladder, SeparateShellsWorkToo) {
  const int port = free_port();
  std::vector<ProcSpec> specs;
  for (int r = 0; r < 2; ++r) {
    specs.push_back({{"03_manual_allreduce", "--rank", std::to_string(r), "--world-size", "2", "--master-port",
                      std::to_string(port), "--timeout", "20"}});
  }
  auto rs = run_all(specs, 120);
  for (auto& r : rs) {
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(count(r.output, "check: every rank holds the same parameters: OK"), 1) << r.output;
  }
}

TEST(Ladder, TheChecksCatchRanksThatDisagree) {
  // Different seeds: different initial weights, so the replicas cannot end up identical.
  // The self-check must say so and fail; a check that cannot fail proves nothing.
  const int port = free_port();
  std::vector<ProcSpec> specs;
  for (int r = 0; r < 2; ++r) {
    specs.push_back({{"04_grad_hooks", "--rank", std::to_string(r), "--world-size", "2", "--master-port",
                      std::to_string(port), "--timeout", "20", "--seed", std::to_string(r)}});
  }
  auto rs = run_all(specs, 120);
  for (auto& r : rs) {
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("check: every rank holds the same parameters: FAILED"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("the ranks' parameters differ"), std::string::npos) << r.output;
  }
}

struct Parity {
  std::string name;
  std::string chapter;
  int world;
  std::vector<std::string> args;  // for the C++ chapter and the Python script alike
  std::string tolerance;
};
void PrintTo(const Parity& p, std::ostream* os) { *os << p.name; }

class MatchesPyTorchDDP : public ::testing::TestWithParam<Parity> {};

TEST_P(MatchesPyTorchDDP, FinalParameters) {
  const std::string why = reference_python_skip_reason();
  if (!why.empty()) GTEST_SKIP() << why;
#ifdef DDP_REFERENCE_PYTHON
  const Parity& p = GetParam();
  const std::string dir = temp_dir();
  std::vector<std::string> args = {"--save-init", dir + "/init.pt", "--save-params", dir + "/final.pt"};
  args.insert(args.end(), p.args.begin(), p.args.end());
  auto cpp = train(p.chapter, p.world, args);
  ASSERT_EQ(cpp.exit_code, 0) << cpp.output;
  ProcSpec py{{DDP_REFERENCE_PYTHON, std::string(DDP_SOURCE_DIR) + "/tests/ddp_reference.py", "--init", dir + "/init.pt",
               "--compare", dir + "/final.pt", "--world-size", std::to_string(p.world), "--tolerance", p.tolerance}};
  for (auto& a : p.args) {
    if (a != "--comm" && a != "async" && a != "sync") py.argv.push_back(a);  // a C++-only choice
  }
  auto r = run_one(py, 180);
  std::system(("rm -rf " + dir).c_str());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(": OK"), std::string::npos) << r.output;
  if (p.tolerance == "0") EXPECT_NE(r.output.find("bit-identical: yes"), std::string::npos) << r.output;
#endif
}

INSTANTIATE_TEST_SUITE_P(
    Ladder, MatchesPyTorchDDP,
    ::testing::Values(Parity{"Manual2RanksBitIdentical", "03_manual_allreduce", 2, {}, "0"},
                      Parity{"Hooks2RanksBitIdentical", "04_grad_hooks", 2, {"--comm", "async"}, "0"},
                      Parity{"HooksMomentum2RanksBitIdentical", "04_grad_hooks", 2, {"--momentum", "0.9"}, "0"},
                      Parity{"Manual4RanksWithin1e6", "03_manual_allreduce", 4, {}, "1e-6"},
                      Parity{"Hooks4RanksWithin1e6", "04_grad_hooks", 4, {"--comm", "async"}, "1e-6"}),
    [](const ::testing::TestParamInfo<Parity>& i) { return i.param.name; });
