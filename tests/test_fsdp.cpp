// Chapter 07 (FSDP) as real processes: its final parameters against PyTorch's fully_shard, bit
// for bit, where the reference Python has it (the cuda flavour's torch 2.11); against PyTorch's
// DDP where it has not (Debian's 1.13); prefetch and the collectives changing nothing; the
// sharded checkpoints resumed at the same world and at others; the memory limit; bad flags.
#include <gtest/gtest.h>

#include <regex>
#include <set>

#include "proc.h"
#include "reference.h"

using namespace ddp_test;

namespace {

void expect_ok(const ProcResult& r) {
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// Every rank's "peak of the tensors ... allocated N MiB", in MiB.
std::vector<double> peaks(const ProcResult& r) {
  std::vector<double> all;
  const std::regex peak("peak of the tensors training allocated ([0-9.]+) MiB");
  for (std::sregex_iterator it(r.output.begin(), r.output.end(), peak), end; it != end; ++it) all.push_back(std::stod((*it)[1]));
  return all;
}

std::string fingerprint(const ProcResult& r) {
  const std::set<std::string> prints = fingerprints(r.output);
  EXPECT_EQ(prints.size(), 1u) << r.output;
  return prints.empty() ? "" : *prints.begin();
}

struct FsdpParity {
  std::string name, model;
  std::vector<std::string> args;  // to both sides
  int world = 2;
  std::string train_samples = "2048";
  // Against PyTorch's DDP (no fully_shard in the reference's PyTorch): 0 where the sums come in
  // one order (2 ranks: a+b), else what another order of the same float32 additions leaves.
  std::string ddp_tolerance = "0";
};
void PrintTo(const FsdpParity& p, std::ostream* os) { *os << p.name; }

class FsdpMatchesPyTorch : public ::testing::TestWithParam<FsdpParity> {};

// Note [What 07 is held against]
// PyTorch's fully_shard (FSDP2) runs on Gloo from 2.4 on: with the cuda flavour's torch 2.11 the
// reference is it, wrapping the same layers, and the parameters must agree bit for bit. Debian's
// PyTorch 1.13 has no fully_shard (its FSDP1 needs a GPU for its streams), so there 07 is held
// against PyTorch 1.13's DDP on the same data: at 2 ranks each gradient element is a + b either
// way, halved: bit for bit; at 3 and 4 the reduce-scatter adds in Gloo's order, the all-reduce
// in its ring's, and divides by n where DDP multiplies by 1/n: the same float32 numbers summed
// otherwise, held to 1e-6. Both sides run 07 with --collectives gloo-order.
TEST_P(FsdpMatchesPyTorch, FinalParameters) {
#ifndef DDP_REFERENCE_PYTHON
  GTEST_SKIP() << "no Python with PyTorch configured (DDP_REFERENCE_PYTHON): scripts/build.sh sets it";
#else
  const FsdpParity& p = GetParam();
  const std::string dir = temp_dir();
  const std::vector<std::string> shared =
      plus({"--model", p.model, "--train-samples", p.train_samples, "--batch-size", "32", "--warmup-steps", "5"}, p.args);
  // --collectives gloo-order: each sum in the order PyTorch's Gloo adds it (Note [Summing in Gloo's order]).
  auto cpp = fsdp_trainer(p.world, plus(plus(shared, {"--timeout", "20", "--out", dir, "--test-samples", "500", "--collectives", "gloo-order"}),
                                        {"--save-init", dir + "/init.pt", "--save-params", dir + "/final.pt"}),
                          60, {{"OMP_NUM_THREADS", "1"}});
  expect_ok(cpp);
  auto reference = [&](const std::string& script, const std::string& tolerance) {
    ProcSpec py{{DDP_REFERENCE_PYTHON, std::string(DDP_SOURCE_DIR) + "/tests/" + script, "--init", dir + "/init.pt", "--compare",
                 dir + "/final.pt", "--world-size", std::to_string(p.world), "--tolerance", tolerance}};
    py.argv.insert(py.argv.end(), shared.begin(), shared.end());
    return run_reference(py, /*served=*/true);
  };
  ProcResult r = reference("fsdp_reference.py", "0");
  const bool has_fully_shard = r.exit_code != 2;
  if (!has_fully_shard) {
    EXPECT_NE(r.output.find("has no torch.distributed.fsdp.fully_shard"), std::string::npos) << r.output;
    std::cout << "the reference's PyTorch has no fully_shard: 07 held against its DDP to " << p.ddp_tolerance
              << " (Note [What 07 is held against])\n";
    r = reference("trainer_reference.py", p.ddp_tolerance);
  }
  std::system(("rm -rf " + dir).c_str());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  if (has_fully_shard || p.ddp_tolerance == "0") EXPECT_NE(r.output.find("bit-identical: yes"), std::string::npos) << r.output;
#endif
}

INSTANTIATE_TEST_SUITE_P(
    Fsdp, FsdpMatchesPyTorch,
    ::testing::Values(FsdpParity{"Mlp", "mlp", {"--max-steps", "20"}},
                      // 1000 images at 3 ranks: 334 each, 11 batches, the last of 14; fc1's 512
                      // rows cut 171, 171, 170 (padded), fc3's 10: 4, 4, 2.
                      FsdpParity{"Mlp3RanksPadded", "mlp", {"--max-steps", "14"}, 3, "1000", "1e-6"},
                      FsdpParity{"Mlp4RanksPadded", "mlp", {"--max-steps", "10"}, 4, "1000", "1e-6"},
                      FsdpParity{"Cnn", "cnn", {"--max-steps", "8"}},
                      FsdpParity{"Cnn3Ranks", "cnn", {"--max-steps", "6"}, 3, "1000", "1e-6"},
                      FsdpParity{"Cnn4Ranks", "cnn", {"--max-steps", "5"}, 4, "1000", "1e-6"},
                      FsdpParity{"MlpAccumulating", "mlp", {"--max-steps", "10", "--grad-accum", "2"}},
                      FsdpParity{"Mlp3RanksAccumulating", "mlp", {"--max-steps", "8", "--grad-accum", "2"}, 3, "1000", "1e-6"},
                      FsdpParity{"CnnAccumulating", "cnn", {"--max-steps", "5", "--grad-accum", "3"}},
                      FsdpParity{"MlpAdamW", "mlp", {"--max-steps", "20", "--optimizer", "adamw", "--lr", "1e-3", "--weight-decay", "0.01"}},
                      FsdpParity{"MlpAdamW3Ranks", "mlp",
                                 {"--max-steps", "14", "--optimizer", "adamw", "--lr", "1e-3", "--weight-decay", "0.01"}, 3, "1000", "1e-6"},
                      FsdpParity{"CnnAdamW4Ranks", "cnn",
                                 {"--max-steps", "5", "--optimizer", "adamw", "--lr", "1e-3", "--weight-decay", "0.01"}, 4, "1000", "1e-6"}),
    [](const ::testing::TestParamInfo<FsdpParity>& i) { return i.param.name; });

}  // namespace

namespace {

// The MLP at `world` ranks on 1000 images (fc1's rows padded at 3 ranks), 6 steps.
std::vector<std::string> short_run(const std::string& out) {
  return {"--train-samples", "1000", "--test-samples", "300", "--batch-size", "32", "--warmup-steps", "5", "--max-steps", "6",
          "--timeout", "20", "--expect-accuracy", "0", "--out", out};
}

}  // namespace

// Note [Prefetch]: --prefetch changes when an all-gather travels, never what. The ring's
// reduce-scatter in Gloo's order (--collectives gloo-order) sums as c10d's own does (Note
// [Summing in Gloo's order]), which LibTorch 1.13's Gloo lacks: there the flag is refused,
// naming why. At 3 ranks chapter 03's order (the default) is another order of the same sums.
TEST(Fsdp, PrefetchAndTheCollectivesChangeWhenNotWhat) {
  const std::string dir = temp_dir();
  std::set<std::string> prints;
  for (const std::string prefetch : {"0", "1", "3"}) {
    auto r = fsdp_trainer(3, plus(short_run(dir + "/p" + prefetch), {"--prefetch", prefetch}));
    expect_ok(r);
    prints.insert(fingerprint(r));
  }
  EXPECT_EQ(prints.size(), 1u) << "--prefetch changed the numbers";
  auto gloo_order = fsdp_trainer(3, plus(short_run(dir + "/gloo"), {"--collectives", "gloo-order"}));
  expect_ok(gloo_order);
  EXPECT_NE(gloo_order.output.find("re-cut)"), std::string::npos) << gloo_order.output;
  auto c10d = fsdp_trainer(3, plus(short_run(dir + "/c10d"), {"--collectives", "c10d"}));
  if (c10d.exit_code == 2) {
    EXPECT_NE(c10d.output.find("--collectives c10d: LibTorch 1.13"), std::string::npos) << c10d.output;
  } else {
    expect_ok(c10d);
    EXPECT_EQ(fingerprint(c10d), fingerprint(gloo_order)) << "the ring in Gloo's order and c10d's collectives summed differently";
  }
  std::system(("rm -rf " + dir).c_str());
}

// Note [Prefetch]'s claim about PyTorch, held against PyTorch's own fully_shard where the
// reference has it (2.11): rank 0's first step records when FSDP2 issues each unit's all-gather
// beside each unit's forward and the end of its backward (tests/fsdp_reference.py
// --record-order). By default FSDP2 gathers each unit in its own pre-forward and prefetches one
// unit in backward; asked to prefetch the next unit in forward (set_modules_to_forward_prefetch),
// it issues what 07's default, --prefetch 1, issues (forward and pre_backward in fsdp.cpp: unit
// u's all-gather and u+1's before u computes; in backward u-1's once u's backward begins).
TEST(Fsdp, PyTorchsPrefetchOrderIsWhatNotePrefetchSays) {
#ifndef DDP_REFERENCE_PYTHON
  GTEST_SKIP() << "no Python with PyTorch configured (DDP_REFERENCE_PYTHON): scripts/build.sh sets it";
#else
  const std::string dir = temp_dir();
  const std::vector<std::string> shared = {"--model", "mlp", "--train-samples", "2048", "--batch-size", "32", "--warmup-steps", "5",
                                           "--max-steps", "2"};
  auto cpp = fsdp_trainer(2, plus(shared, {"--timeout", "20", "--out", dir, "--test-samples", "300", "--expect-accuracy", "0",
                                           "--collectives", "gloo-order", "--save-init", dir + "/init.pt", "--save-params", dir + "/final.pt"}),
                          60, {{"OMP_NUM_THREADS", "1"}});
  expect_ok(cpp);
  auto order = [&](const std::string& file, bool forward_prefetch) {
    ProcSpec py{{DDP_REFERENCE_PYTHON, std::string(DDP_SOURCE_DIR) + "/tests/fsdp_reference.py", "--init", dir + "/init.pt", "--compare",
                 dir + "/final.pt", "--world-size", "2", "--tolerance", "0", "--record-order", dir + "/" + file}};
    py.argv.insert(py.argv.end(), shared.begin(), shared.end());
    if (forward_prefetch) py.argv.push_back("--forward-prefetch");
    ProcResult r = run_one(py, 120);
    return std::make_pair(r, read_text(dir + "/" + file));
  };
  auto [plain, fsdp2] = order("default.txt", false);
  if (plain.exit_code == 2 && plain.output.find("has no torch.distributed.fsdp.fully_shard") != std::string::npos) {
    std::system(("rm -rf " + dir).c_str());
    GTEST_SKIP() << "the reference's PyTorch has no fully_shard: " << plain.output;
  }
  EXPECT_EQ(plain.exit_code, 0) << plain.output;
  const std::string backward = "gather fc3\ngather fc2\nbackward fc3\ngather fc1\nbackward fc2\n";  // one unit ahead
  EXPECT_EQ(fsdp2, "gather fc1\nforward fc1\ngather fc2\nforward fc2\ngather fc3\nforward fc3\n" + backward)
      << "PyTorch's FSDP2 by default, unlike Note [Prefetch]";
  auto [asked, prefetching] = order("forward_prefetch.txt", true);
  EXPECT_EQ(asked.exit_code, 0) << asked.output;
  const std::string ours = "gather fc1\ngather fc2\nforward fc1\ngather fc3\nforward fc2\nforward fc3\n" + backward;  // --prefetch 1
  EXPECT_EQ(prefetching, ours) << "PyTorch's FSDP2 with set_modules_to_forward_prefetch, unlike 07's --prefetch 1";
  std::system(("rm -rf " + dir).c_str());
#endif
}

// Note [Sharded checkpoints]: rank 1 killed after step 6 (checkpoints of steps 4 written by both
// ranks); run again, each rank reads its own shard back and the run ends bit for bit where an
// uninterrupted one does. The same files read at 4 ranks and at 1 put each parameter together
// whole and cut it again: stopped at step 4 they hold step 4's parameters to the bit (the
// warm-up makes step 4 the same in a run of 4 steps and of 12); trained on at 4 ranks they end
// where the uninterrupted run does but for the order of 4 ranks' sums (the optimizer state
// was cut again too: with it lost, AdamW's first step after the resume moves each weight by
// about lr, 1e-3). The load's memory is in the peak each rank reports (Note [Sharded
// checkpoints]): at 4 ranks no rank holds what the two old files hold together, parameters and
// AdamW's two moments, 4Ψ(1+2); at 1 rank the rank's own shard is all of it, and one old file
// (half of it) is beside it while its rows are copied: 1.5 x 4Ψ(1+2).
TEST(Fsdp, KilledRunsResumeFromTheirShardsAtTheSameWorldOrAnother) {
  const std::string base = temp_dir();
  const std::vector<std::string> run = {"--train-samples", "2048", "--test-samples", "300", "--global-batch", "64", "--warmup-steps", "5",
                                        "--timeout", "20", "--ckpt-every", "4", "--optimizer", "adamw", "--lr", "1e-3",
                                        "--weight-decay", "0.01", "--expect-accuracy", "0"};
  auto whole = fsdp_trainer(2, plus(run, {"--max-steps", "12", "--out", base + "/whole", "--save-params", base + "/whole.pt"}));
  expect_ok(whole);
  auto four = fsdp_trainer(2, plus(run, {"--max-steps", "4", "--out", base + "/four"}));
  expect_ok(four);
  auto killed = fsdp_trainer(2, plus(run, {"--max-steps", "12", "--out", base + "/killed", "--kill-rank", "1", "--kill-at-step", "6"}));
  EXPECT_NE(killed.exit_code, 0) << killed.output;
  for (const char* r : {"rank-0", "rank-1"}) {
    ASSERT_FALSE(read_text(base + "/killed/checkpoints/" + r + "/ckpt-000000004.pt").empty()) << killed.output;
  }
  for (const char* copy : {"at4", "at1", "at4-on"}) std::system(("cp -r " + base + "/killed " + base + "/" + copy).c_str());

  auto again = fsdp_trainer(2, plus(run, {"--max-steps", "12", "--out", base + "/killed"}));
  expect_ok(again);
  EXPECT_NE(again.output.find("resumed from the 2 shards of step 4"), std::string::npos) << again.output;
  EXPECT_EQ(fingerprint(again), fingerprint(whole));

  for (const auto& [world, folder] : {std::pair<int, std::string>{4, "at4"}, {1, "at1"}}) {
    auto r = fsdp_trainer(world, plus(run, {"--max-steps", "4", "--out", base + "/" + folder}));
    expect_ok(r);
    EXPECT_NE(r.output.find("resumed from the 2 shards of step 4 (ckpt-000000004.pt), cut again for " + std::to_string(world) + " ranks"),
              std::string::npos)
        << r.output;
    EXPECT_EQ(fingerprint(r), fingerprint(four)) << "at " << world << " ranks";
    const double psi = 784 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10, files = 4 * psi * 3 / 1048576;  // MiB
    const std::vector<double> p = peaks(r);
    EXPECT_EQ(p.size(), static_cast<size_t>(world)) << r.output;
    for (double peak : p) {
      if (world == 4) EXPECT_LT(peak, files) << "a rank at 4 ranks held the old files' worth: " << r.output;
      if (world == 1) EXPECT_GE(peak, 1.5 * files - 0.005) << "the load's peak is not in the report: " << r.output;
    }
  }
#ifdef DDP_REFERENCE_PYTHON
  auto on = fsdp_trainer(4, plus(run, {"--max-steps", "12", "--out", base + "/at4-on", "--save-params", base + "/at4-on.pt"}));
  expect_ok(on);
  ProcSpec diff{{DDP_REFERENCE_PYTHON, "-c",
                 "import sys; sys.path.insert(0, '" + std::string(DDP_SOURCE_DIR) + "/tests'); from reference_util import load_list; "
                 "a, b = load_list(sys.argv[1]), load_list(sys.argv[2]); "
                 "print('max |diff|', max((x - y).abs().max().item() for x, y in zip(a, b)))",
                 base + "/whole.pt", base + "/at4-on.pt"}};
  auto d = run_one(diff, 60);
  ASSERT_EQ(d.exit_code, 0) << d.output;
  const double max_diff = std::stod(d.output.substr(d.output.find("max |diff|") + 11));
  std::cout << "resumed at 4 ranks and trained on: " << max_diff << " from the uninterrupted 2-rank run\n";
  EXPECT_LT(max_diff, 1e-6) << d.output;
#else
  std::cout << "no Python with PyTorch configured (DDP_REFERENCE_PYTHON): the run resumed at 4 ranks and trained on is not compared\n";
#endif
  std::system(("rm -rf " + base).c_str());
}

// A step is whole only with every rank's shard: one deleted, the resume skips to the step
// before, saying which rank's file is missing. And a checkpoint of another run (Note [Never
// lose a run]) is refused, exit 2, every file left as it was.
TEST(Fsdp, AStepMissingAShardIsSkippedAndAnotherRunsIsRefusedIntact) {
  const std::string out = temp_dir();
  auto first = fsdp_trainer(2, plus(short_run(out), {"--ckpt-every", "2"}));
  expect_ok(first);
  const std::string newest = out + "/checkpoints/rank-1/ckpt-000000006.pt";
  ASSERT_FALSE(read_text(newest).empty()) << first.output;
  const std::string kept = read_text(out + "/checkpoints/rank-0/ckpt-000000006.pt");
  auto cnn = fsdp_trainer(2, plus(short_run(out), {"--model", "cnn"}));
  EXPECT_EQ(cnn.exit_code, 2) << cnn.output;
  EXPECT_NE(cnn.output.find("refusing to resume from " + out + "/checkpoints/rank-0/ckpt-000000006.pt: it is intact but not this run's: "
                            "it holds --model mlp, this run builds --model cnn"),
            std::string::npos)
      << cnn.output;
  EXPECT_EQ(read_text(out + "/checkpoints/rank-0/ckpt-000000006.pt"), kept);
  std::remove(newest.c_str());
  auto resumed = fsdp_trainer(2, plus(short_run(out), {"--max-steps", "8"}));
  expect_ok(resumed);
  EXPECT_NE(resumed.output.find("rank 1's shard " + newest + " is missing"), std::string::npos) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from the 2 shards of step 4"), std::string::npos) << resumed.output;
  std::system(("rm -rf " + out).c_str());
}

// Note [A memory limit on a CPU]: under 10 MiB of tensors a rank, the MLP with AdamW does not
// fit one rank (its state alone is 8.2 MiB with the parameters and gradients: the run fails,
// "out of memory", naming the sizes), nor four under DDP, each holding all of it; sharded over
// four ranks it trains, each rank's peak under the limit.
TEST(Fsdp, AModelThatDoesNotFitOneRanksMemoryTrainsWhenSharded) {
  const std::string dir = temp_dir();
  const std::vector<std::string> run = {"--train-samples", "2048", "--test-samples", "300", "--batch-size", "32", "--warmup-steps", "5",
                                        "--max-steps", "3", "--optimizer", "adamw", "--lr", "1e-3", "--timeout", "20",
                                        "--expect-accuracy", "0", "--memory-limit-mb", "10"};
  auto one = fsdp_trainer(1, plus(run, {"--out", dir + "/one"}));
  EXPECT_EQ(one.exit_code, 1) << one.output;
  EXPECT_NE(one.output.find("out of memory (--memory-limit-mb 10.00 MiB): tried to allocate"), std::string::npos) << one.output;
  auto ddp = trainer(4, plus(run, {"--out", dir + "/ddp"}));
  EXPECT_NE(ddp.exit_code, 0) << ddp.output;
  EXPECT_NE(ddp.output.find("out of memory (--memory-limit-mb 10.00 MiB)"), std::string::npos) << ddp.output;
  auto sharded = fsdp_trainer(4, plus(run, {"--out", dir + "/fsdp"}));
  expect_ok(sharded);
  std::smatch m;
  std::string rest = sharded.output;
  int peaks = 0;
  while (std::regex_search(rest, m, std::regex("peak of the tensors training allocated ([0-9.]+) MiB"))) {
    EXPECT_LT(std::stod(m[1]), 10.0) << sharded.output;
    ++peaks;
    rest = m.suffix();
  }
  EXPECT_EQ(peaks, 4) << sharded.output;
  std::system(("rm -rf " + dir).c_str());
}

// Bad input exits 2 naming it, before anything trains.
TEST(Fsdp, BadFlagsAreRefusedWithExit2) {
  const std::string dir = temp_dir();
  struct Bad {
    std::vector<std::string> flags;
    std::string says;
  };
  for (const Bad& b : {Bad{{"--prefetch", "-1"}, "--prefetch"}, Bad{{"--collectives", "nccl"}, "--collectives"},
                       Bad{{"--zero"}, "--zero: a flag of 05_ddp's trainer that 07_fsdp does not take"},
                       Bad{{"--comm-hook", "fp16"}, "--comm-hook: a flag of 05_ddp's trainer"},
                       Bad{{"--memory-limit-mb", "0"}, "--memory-limit-mb"},
                       Bad{{"--model", "cnn_bn"}, "--model cnn_bn: 07_fsdp shards mlp and cnn"}}) {
    auto r = fsdp_trainer(2, plus(short_run(dir), b.flags), 60);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(b.says), std::string::npos) << r.output;
  }
  std::system(("rm -rf " + dir).c_str());
}

// More ranks than some parameters have rows: fc3's 10 at 8 ranks are chunks of 2, and ranks 5
// to 7 own none of it (Note [Sharding a unit]). The run trains and checks itself; its 8 shards,
// 3 of them without fc3's rows, read at 2 ranks give its parameters to the bit.
TEST(Fsdp, RanksWithoutRowsOfAParameterTrainAndTheirShardsResume) {
  const std::string dir = temp_dir();
  const std::vector<std::string> run = {"--train-samples", "1024", "--test-samples", "200", "--global-batch", "64", "--warmup-steps", "5",
                                        "--max-steps", "3", "--timeout", "30", "--expect-accuracy", "0", "--out", dir};
  auto eight = fsdp_trainer(8, run, 120);
  expect_ok(eight);
  EXPECT_NE(eight.output.find("fc3 (2570 elements, 514 a rank)"), std::string::npos) << eight.output;
  auto two = fsdp_trainer(2, run, 60);
  expect_ok(two);
  EXPECT_NE(two.output.find("resumed from the 8 shards of step 3"), std::string::npos) << two.output;
  EXPECT_EQ(fingerprint(two), fingerprint(eight));
  std::system(("rm -rf " + dir).c_str());
}
