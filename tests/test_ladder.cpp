// The equivalence ladder of chapters 03-04: hand-written averaging == hook-driven averaging
// (bit for bit) == one process on the global batch (within tolerance) == PyTorch's own DDP.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>

#include "proc.h"
#include "reference.h"

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

// --allreduce ring: chapter 03's own ring all-reduce (Note [The ring all-reduce] in its main.cpp)
// trains at any world size and passes the chapter's checks. The output layer's bias has 1
// element, fewer than the ranks from 2 on: its other chunks are empty; 16 and 128 elements do
// not divide by 3, 5 or 7: uneven chunks.
class Ring : public ::testing::TestWithParam<int> {};

TEST_P(Ring, TrainsAndSendsExactlyTheRingsBytes) {
  const int world = GetParam();
  // The toy model's size, from its definition (Linear(F,H) -> Tanh -> Linear(H,1), float32),
  // not from the program's output: weights and biases of both layers.
  std::smatch m;
  const std::string header = read_text(std::string(DDP_SOURCE_DIR) + "/common/data/toy_task.h");
  ASSERT_TRUE(std::regex_search(header, m, std::regex(R"(kFeatures = (\d+), kHidden = (\d+);)"))) << header;
  const long long features = std::stoll(m[1]), hidden = std::stoll(m[2]);
  const long long grad_bytes = 4 * (features * hidden + hidden + hidden * 1 + 1);  // 4 x 161
  const long long total = 2LL * (world - 1) * grad_bytes;  // every chunk sent n-1 times in each half

  const ProcResult r = train("03_manual_allreduce", world, {"--allreduce", "ring"});
  expect_checks_passed(r, world);
  const std::string bytes_ok = "check: ring bytes sent by all ranks: " + std::to_string(total) + " = 2(n-1) x " +
                               std::to_string(grad_bytes) + ": OK";
  EXPECT_EQ(count(r.output, bytes_ok), world) << bytes_ok << "\n" << r.output;
  // The ranks' own counts ("ring: sent X bytes per step") add up to the same total.
  long long sum = 0;
  int lines = 0;
  const std::regex sent(R"(ring: sent (\d+) bytes per step)");
  for (std::sregex_iterator it(r.output.begin(), r.output.end(), sent), end; it != end; ++it, ++lines) sum += std::stoll((*it)[1]);
  EXPECT_EQ(lines, world) << r.output;
  EXPECT_EQ(sum, total) << r.output;
  EXPECT_EQ(count(r.output, "check: ring against c10d's all-reduce: max |diff| = "), world) << r.output;
  EXPECT_EQ(count(r.output, " (tolerance 1e-05): OK"), world) << r.output;
  // At 1 and 2 ranks the additions come in c10d's order: see Note [Ring against c10d: when the bits agree].
  if (world <= 2) EXPECT_EQ(count(r.output, ", bit-identical (tolerance"), world) << r.output;
}

// 1: nothing to send; 3, 5, 7: no power of two; 7: tensors shorter than the world.
INSTANTIATE_TEST_SUITE_P(WorldSize, Ring, ::testing::Values(1, 2, 3, 4, 5, 7));

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
#ifndef DDP_REFERENCE_PYTHON
  GTEST_SKIP() << "no Python with PyTorch configured (DDP_REFERENCE_PYTHON): scripts/build.sh sets it";
#else
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
  auto r = run_reference(py, /*served=*/true, 180);  // one import of torch (Note [One import of torch for the parity cases])
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
