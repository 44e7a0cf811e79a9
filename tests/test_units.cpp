// Unit tests of chapter 05's parts, in one process: the sampler against Python's, the bucket
// plan, the DDP class's bookkeeping, checkpoints, the IDX reader and the TensorBoard CRC.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <functional>
#include <mutex>
#include <regex>
#include <sstream>
#include <thread>

#include "05_ddp/ddp.h"
#include "05_ddp/beyond/amp.h"
#include "05_ddp/beyond/gpu_timeline.h"
#include "05_ddp/trainer/metrics.h"
#include "05_ddp/models.h"
#include "05_ddp/trainer/sgd.h"
#include "05_ddp/beyond/sync_batch_norm.h"
#include "05_ddp/beyond/unused_parameters.h"
#include "common/state/checkpoint.h"
#include "common/launch/error_file.h"
#include "common/basics/errors.h"
#include "common/data/fashion_mnist.h"
#include "common/launch/net.h"
#include "common/group/process_group.h"
#include "common/data/sampler.h"
#include "common/observe/tensorboard.h"
#include "common/observe/trace.h"
#include "proc.h"
#include "reference.h"

using namespace ddp_test;

namespace {

// Python's DistributedSampler indices for each spec ("n,world,seed,epoch,shuffle,drop_last"):
// result[spec][rank] = that rank's index list. One request for all specs, to the reference
// server when it answers (its first line then says so, and is no index list).
std::vector<std::vector<std::vector<int64_t>>> python_sampler(const std::vector<std::string>& specs) {
  std::vector<std::vector<std::vector<int64_t>>> out;
#ifdef DDP_REFERENCE_PYTHON
  ProcSpec p{{DDP_REFERENCE_PYTHON, std::string(DDP_SOURCE_DIR) + "/tests/trainer_reference.py"}};
  for (const auto& s : specs) p.argv.insert(p.argv.end(), {"--print-sampler", s});
  auto r = run_reference(p, /*served=*/true, 60);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("[served by ", 0) == 0) continue;
    if (line == "--") {  // the end of one spec
      out.emplace_back();
      continue;
    }
    if (out.empty()) out.emplace_back();
    std::istringstream in(line);
    out.back().emplace_back();
    for (int64_t v; in >> v;) out.back().back().push_back(v);
  }
#else
  (void)specs;
#endif
  return out;
}

std::string write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::string gzip_bytes(const std::string& raw) {
  uLongf n = compressBound(raw.size()) + 64;
  std::string out(n, '\0');
  z_stream z{};
  deflateInit2(&z, 6, Z_DEFLATED, 16 + 15, 8, Z_DEFAULT_STRATEGY);  // 16+: a gzip header
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(raw.data()));
  z.avail_in = raw.size();
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = n;
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// An IDX file of `count` 28x28 images, gzipped.
std::string idx_images(int count) {
  std::string raw = {0, 0, 8, 3};
  for (uint32_t d : {static_cast<uint32_t>(count), 28u, 28u}) {
    for (int s = 24; s >= 0; s -= 8) raw.push_back(static_cast<char>(d >> s & 0xff));
  }
  raw += std::string(static_cast<size_t>(count) * 28 * 28, '\x7f');
  return raw;
}

}  // namespace

// ---- the sampler ----

TEST(Sampler, SameIndicesAsPythonsDistributedSampler) {
#ifndef DDP_REFERENCE_PYTHON
  GTEST_SKIP() << "no Python with PyTorch configured (DDP_REFERENCE_PYTHON): scripts/build.sh sets it";
#endif
  // n, world, seed, epoch, shuffle, drop_last: uneven splits, padding longer than the data,
  // drop_last, several epochs, no shuffle, and the real training set's size.
  const std::vector<std::array<int64_t, 6>> specs = {{10, 3, 0, 0, 1, 0}, {10, 3, 0, 1, 1, 0}, {10, 3, 7, 2, 1, 1},
                                                     {2, 5, 0, 0, 1, 0},  {10, 4, 0, 0, 0, 0}, {10, 4, 0, 0, 0, 1},
                                                     {60000, 2, 0, 0, 1, 0}, {10000, 3, 0, 0, 0, 0}};
  std::vector<std::string> spec_text;
  for (const auto& s : specs) {
    std::string spec;
    for (int64_t v : s) spec += (spec.empty() ? "" : ",") + std::to_string(v);
    spec_text.push_back(spec);
  }
  const auto python = python_sampler(spec_text);
  ASSERT_EQ(python.size(), specs.size() + 1);  // each spec ends with "--", which opens the next
  for (size_t i = 0; i < specs.size(); ++i) {
    const auto& s = specs[i];
    const std::string& spec = spec_text[i];
    const auto& expected = python[i];
    ASSERT_EQ(expected.size(), static_cast<size_t>(s[1])) << spec;
    for (int r = 0; r < s[1]; ++r) {
      ddp::DistributedSampler sampler(s[0], r, static_cast<int>(s[1]), s[4] != 0, static_cast<uint64_t>(s[2]), s[5] != 0);
      sampler.set_epoch(s[3]);
      EXPECT_EQ(sampler.indices(), expected[r]) << "spec " << spec << ", rank " << r;
    }
  }
}

TEST(Sampler, EveryRankGetsAsManyAndPaddingIsMarked) {
  // 10 samples on 4 ranks: 3 each; positions 10 and 11 of the padded list repeat samples.
  int padded = 0;
  std::vector<int> seen(10, 0);
  for (int r = 0; r < 4; ++r) {
    ddp::DistributedSampler s(10, r, 4, false);
    ASSERT_EQ(s.num_samples(), 3);
    const auto idx = s.indices();
    for (int64_t k = 0; k < 3; ++k) {
      if (s.is_padding(k)) {
        ++padded;
      } else {
        ++seen[idx[k]];
      }
    }
  }
  EXPECT_EQ(padded, 2);
  for (int c : seen) EXPECT_EQ(c, 1);  // without the padding, every sample exactly once
}

TEST(Sampler, SetEpochReshufflesTheSameWayOnEveryRank) {
  ddp::DistributedSampler a(100, 0, 2), b(100, 0, 2);
  const auto epoch0 = a.indices();
  a.set_epoch(1);
  b.set_epoch(1);
  EXPECT_NE(a.indices(), epoch0);
  EXPECT_EQ(a.indices(), b.indices());
}

// ---- buckets ----

TEST(Buckets, FirstBucketSmallThenUpToTheCap) {
  // Sizes in bytes; limits 100 (first) then 250.
  const std::vector<size_t> sizes = {60, 60, 60, 200, 100, 10};
  const auto b = ddp::assign_buckets({0, 1, 2, 3, 4, 5}, sizes, 100, 250);
  EXPECT_EQ(b, (std::vector<std::vector<size_t>>{{0, 1}, {2, 3}, {4, 5}}));
  // In a recorded order (as after the first iteration) the order is kept as given.
  const auto r = ddp::assign_buckets({5, 4, 3, 2, 1, 0}, sizes, 100, 250);
  EXPECT_EQ(r, (std::vector<std::vector<size_t>>{{5, 4}, {3, 2}, {1, 0}}));
}

namespace {
struct TwoLayers : torch::nn::Module {
  TwoLayers() {
    a = register_module("a", torch::nn::Linear(300, 300));  // 360 KB of weights
    b = register_module("b", torch::nn::Linear(300, 300));
    unused = register_module("unused", torch::nn::Linear(2, 2));
  }
  torch::nn::Linear a{nullptr}, b{nullptr}, unused{nullptr};
};

ddp::Group one_rank_group(const std::string& dir) {
  ddp::CommonFlags f;
  f.rank = 0;
  f.world_size = 1;
  f.init = "file://" + dir + "/store";
  f.timeout_s = 10;
  f.backend = "gloo";  // CPU behaviour, also on a GPU host
  return ddp::init_process_group(ddp::resolve_rank_info(f));
}

// A DDP class's buckets as "sizes in bytes | each bucket's parameter indices" (float32).
std::string bucket_layout(const ddp::DistributedDataParallel& d, const std::vector<torch::Tensor>& params) {
  std::string sizes, indices;
  for (const auto& bucket : d.bucket_assignment()) {
    int64_t bytes = 0;
    std::string members;
    for (size_t i : bucket) bytes += params[i].numel() * 4, members += (members.empty() ? "" : " ") + std::to_string(i);
    sizes += (sizes.empty() ? "" : ", ") + std::to_string(bytes);
    indices += (indices.empty() ? "" : ", ") + members;
  }
  return sizes + " | " + indices;
}
}  // namespace

// Note [A peer gone mid-write]: a rank that joined ignores SIGPIPE, as a Python rank does, so a
// write to a peer that died fails (EPIPE) instead of ending the process.
TEST(ProcessGroup, ARankThatJoinedSurvivesAWriteToAPeerThatIsGone) {
  std::signal(SIGPIPE, SIG_DFL);
  const std::string dir = temp_dir();
  ddp::Group g = one_rank_group(dir);
  EXPECT_EQ(write_to_a_gone_peer(), EPIPE);  // without the Note, SIGPIPE ends this process here
  g.destroy();
}

// Two hosts that chose different default backends (one saw enough GPUs, one did not) would
// never meet in a collective: the roll call stops both, naming the two choices.
TEST(RollCall, RanksThatChoseDifferentBackendsAreStoppedWithTheirReasons) {
  const std::string dir = temp_dir();
  std::array<std::string, 2> errors;
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      ddp::CommonFlags f;
      f.rank = r, f.world_size = 2, f.timeout_s = 10, f.init = "file://" + dir + "/store";
      ddp::RankInfo info = ddp::resolve_rank_info(f, ddp::process_env(), [r] { return ddp::GpuCount{r == 0 ? 0 : 2, "(test)"}; });
      auto store = ddp::make_store(info);
      try {
        ddp::roll_call(*store, info);
      } catch (const ddp::UsageError& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : ranks) t.join();
  for (const auto& e : errors) {
    EXPECT_NE(e.find("backends disagree: rank "), std::string::npos) << e;
    EXPECT_NE(e.find("gloo (default: no GPU (test))"), std::string::npos) << e;
    EXPECT_NE(e.find("nccl (default: 2 GPUs (test) for 2 local ranks, one GPU each)"), std::string::npos) << e;
  }
}

TEST(DdpClass, RebuildsBucketsInReadyOrderAndNoSyncSkipsCommunication) {
  const std::string dir = temp_dir();
  ddp::Group g = one_rank_group(dir);
  auto m = std::make_shared<TwoLayers>();
  m->unused->weight.set_requires_grad(false);
  m->unused->bias.set_requires_grad(false);
  ddp::DistributedDataParallel d(m, g, 512 * 1024);
  // Parameters 0..3 are a.weight, a.bias, b.weight, b.bias: 705 KiB, below the first bucket's
  // 1 MiB, so one bucket holds them all.
  ASSERT_EQ(d.bucket_assignment().size(), 1u);
  auto x = torch::randn({4, 300});
  m->b->forward(m->a->forward(x)).sum().backward();
  EXPECT_EQ(d.allreduces_last_backward(), 1);
  EXPECT_TRUE(d.rebuilt());
  // Gradients came last layer first: b's, then a's; the rebuilt bucket follows that order.
  const auto rebuilt = d.bucket_assignment();
  ASSERT_EQ(rebuilt.size(), 1u);
  EXPECT_EQ(rebuilt[0].front() / 2, 1u) << "b's parameters should be ready first";
  {
    auto guard = d.no_sync();
    m->b->forward(m->a->forward(x)).sum().backward();
  }
  EXPECT_EQ(d.allreduces_last_backward(), 1) << "no_sync must not start a backward's all-reduces";
  std::system(("rm -rf " + dir).c_str());
}

TEST(DdpClass, ABucketsAllReduceStartsBeforeBackwardEnds) {
  const std::string dir = temp_dir();
  ddp::Group g = one_rank_group(dir);
  struct Wide : torch::nn::Module {
    torch::nn::Linear a = register_module("a", torch::nn::Linear(600, 600));  // 1.4 MB of weights
    torch::nn::Linear b = register_module("b", torch::nn::Linear(600, 600));
  };
  auto m = std::make_shared<Wide>();
  // After the first iteration's rebuild, in ready order: [b.bias, b.weight] fills the 1 MiB
  // first bucket, [a.bias, a.weight] the next (cap 0.2 MiB).
  ddp::DistributedDataParallel d(m, g, 200 * 1024);
  auto x = torch::randn({4, 600});
  for (int it = 0; it < 2; ++it) m->b->forward(m->a->forward(x)).sum().backward();
  ASSERT_EQ(d.bucket_assignment().size(), 2u);
  // b's bucket started after 2 of the 4 gradients: while a's were still being computed.
  EXPECT_EQ(d.gradients_ready_at_launch(), (std::vector<size_t>{2, 4}));
  std::system(("rm -rf " + dir).c_str());
}

// --one-bucket (kOneBucket as the cap): the rebuild keeps one bucket, so its all-reduce starts
// only once all 4 gradients are ready: nothing overlaps backward.
TEST(DdpClass, OneBucketStartsItsAllReduceAfterEveryGradient) {
  const std::string dir = temp_dir();
  ddp::Group g = one_rank_group(dir);
  struct Wide : torch::nn::Module {
    torch::nn::Linear a = register_module("a", torch::nn::Linear(600, 600));
    torch::nn::Linear b = register_module("b", torch::nn::Linear(600, 600));
  };
  auto m = std::make_shared<Wide>();
  ddp::DistributedDataParallel d(m, g, ddp::kOneBucket);
  auto x = torch::randn({4, 600});
  for (int it = 0; it < 2; ++it) m->b->forward(m->a->forward(x)).sum().backward();
  ASSERT_EQ(d.bucket_assignment().size(), 1u);
  EXPECT_EQ(d.gradients_ready_at_launch(), (std::vector<size_t>{4}));
  std::system(("rm -rf " + dir).c_str());
}

// Note [Rebuilding the buckets]: our bucket layout is PyTorch's, at the first iteration (one
// bucket, every parameter) and after the rebuild (sizes and the parameters in ready order), as
// its logger reports them (_get_ddp_logging_data) for the same models. With 3+ ranks the
// layout decides how Gloo's ring sums, so this is what parity at 3 and 4 ranks rests on.
TEST(DdpClass, BucketsMatchPyTorchsAtTheFirstIterationAndAfterTheRebuild) {
#ifndef DDP_REFERENCE_PYTHON
  GTEST_SKIP() << "no Python with PyTorch configured (DDP_REFERENCE_PYTHON): scripts/build.sh sets it";
#else
  const std::string dir = temp_dir();
  ddp::Group g = one_rank_group(dir);
  for (const std::string name : {"mlp", "cnn"}) {
    ddp::AnyModel model = ddp::make_model(name, 0);
    ddp::DistributedDataParallel d(model.module, g, 25 * ddp::kMiB);
    std::vector<torch::Tensor> params = model.module->parameters();
    auto describe = [&](bool with_indices) {
      const std::string layout = bucket_layout(d, params);
      return with_indices ? layout : layout.substr(0, layout.find(" | "));
    };
    const std::string first = describe(false);
    for (int it = 0; it < 3; ++it) {
      auto x = torch::randn({8, 1, 28, 28});
      torch::nn::functional::cross_entropy(model.forward(x), torch::randint(0, 10, {8})).backward();
    }
    const std::string rebuilt = describe(true);
    auto py = run_reference(ProcSpec{{DDP_REFERENCE_PYTHON, std::string(DDP_SOURCE_DIR) + "/tests/trainer_reference.py",
                                      "--print-buckets", name}},
                            /*served=*/true, 60);
    ASSERT_EQ(py.exit_code, 0) << py.output;
    EXPECT_NE(py.output.find("first: " + first + "\n"), std::string::npos) << name << ": ours " << first << "\n" << py.output;
    EXPECT_NE(py.output.find("rebuilt: " + rebuilt + "\n"), std::string::npos) << name << ": ours " << rebuilt << "\n"
                                                                                 << py.output;
  }
  std::system(("rm -rf " + dir).c_str());
#endif
}

// Note [Rebuilding the buckets]: PyTorch's first iteration is one bucket, every parameter in
// definition order, unless find_unused_parameters is set without static_graph; then the buckets
// are cut by size (_ddp_init_helper's bucket_size_limits), as our find_unused_parameters does
// (Note [Unused parameters]). static_graph, not an option of ours, keeps the one bucket even
// with find_unused_parameters. PyTorch's four settings, from its reducer, against ours.
TEST(DdpClass, FirstBucketsAreOneUnlessFindUnusedParametersWithoutStaticGraphAsInPyTorch) {
#ifndef DDP_REFERENCE_PYTHON
  GTEST_SKIP() << "no Python with PyTorch configured (DDP_REFERENCE_PYTHON): scripts/build.sh sets it";
#else
  const std::string dir = temp_dir();
  ddp::Group g = one_rank_group(dir);
  auto py = run_reference(ProcSpec{{DDP_REFERENCE_PYTHON, std::string(DDP_SOURCE_DIR) + "/tests/trainer_reference.py",
                                    "--print-first-buckets", "mlp", "--print-first-buckets", "cnn"}},
                          /*served=*/true, 60);
  ASSERT_EQ(py.exit_code, 0) << py.output;
  for (const std::string name : {"mlp", "cnn"}) {
    auto first_buckets = [&](bool find_unused) {  // "sizes in bytes | each bucket's parameter indices"
      ddp::AnyModel model = ddp::make_model(name, 0);
      ddp::DistributedDataParallel d(model.module, g, 25 * ddp::kMiB);
      if (find_unused) d.set_reducer_option(std::make_unique<ddp::FindUnusedParameters>(d));
      return bucket_layout(d, model.module->parameters());
    };
    const std::string one = first_buckets(false), by_size = first_buckets(true);
    ASSERT_NE(one, by_size) << name << ": the two layouts must differ for this test to tell them apart";
    const std::vector<std::pair<std::string, std::string>> expected = {
        {"static_graph=0 find_unused_parameters=0", one},
        {"static_graph=0 find_unused_parameters=1", by_size},
        {"static_graph=1 find_unused_parameters=0", one},
        {"static_graph=1 find_unused_parameters=1", one}};
    for (const auto& [setting, ours] : expected) {
      EXPECT_NE(py.output.find(name + " " + setting + " first: " + ours + "\n"), std::string::npos)
          << name << ", " << setting << ": ours " << ours << "\n" << py.output;
    }
  }
  std::system(("rm -rf " + dir).c_str());
#endif
}

TEST(DdpClass, AParameterWithoutGradientIsNamed) {
  const std::string dir = temp_dir();
  ddp::Group g = one_rank_group(dir);
  auto m = std::make_shared<TwoLayers>();
  ddp::DistributedDataParallel d(m, g, 25 * ddp::kMiB);
  auto x = torch::randn({4, 300});
  try {
    m->b->forward(m->a->forward(x)).sum().backward();  // `unused` takes no part
    FAIL() << "backward should have failed";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("no gradient for unused.weight, unused.bias"), std::string::npos) << e.what();
  }
  std::system(("rm -rf " + dir).c_str());
}

// ---- checkpoints ----

// Note [One launch for all parameters]: ForeachSgd is LibTorch's SGD with foreach kernels. On
// the CPU (foreach falls back to one tensor at a time) it must give the same bits, with
// weight decay, Nesterov and a parameter whose first gradient comes late; and its state must
// load into LibTorch's SGD and back (checkpoints).
TEST(ForeachSgd, StepsBitIdenticallyToLibTorchsSgd) {
  for (bool nesterov : {false, true}) {
    torch::manual_seed(1);
    std::vector<torch::Tensor> a, b;
    for (auto shape : {std::vector<int64_t>{7, 5}, {5}, {3, 3, 2}}) {
      a.push_back(torch::randn(shape).requires_grad_());
      b.push_back(a.back().detach().clone().requires_grad_());
    }
    const auto options = torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-3).nesterov(nesterov);
    torch::optim::SGD stock(a, options);
    ddp::ForeachSgd ours(b, options);
    for (int step = 0; step < 6; ++step) {
      for (size_t k = 0; k < a.size(); ++k) {
        if (k == 2 && step < 2) continue;  // no gradient yet: no momentum buffer yet
        const auto g = torch::randn(a[k].sizes());
        a[k].mutable_grad() = g.clone();
        b[k].mutable_grad() = g.clone();
      }
      stock.step();
      ours.step();
      for (size_t k = 0; k < a.size(); ++k) ASSERT_TRUE(torch::equal(a[k], b[k])) << "step " << step << " param " << k;
    }
    // Its state is LibTorch's: saved by one, loaded by the other, the next steps still agree.
    std::stringstream saved;
    {
      torch::serialize::OutputArchive out;
      ours.save(out);
      out.save_to(saved);
    }
    torch::optim::SGD reloaded(a, options);
    torch::serialize::InputArchive in;
    in.load_from(saved);
    reloaded.load(in);
    for (size_t k = 0; k < a.size(); ++k) {
      const auto g = torch::randn(a[k].sizes());
      a[k].mutable_grad() = g.clone();
      b[k].mutable_grad() = g.clone();
    }
    reloaded.step();
    ours.step();
    for (size_t k = 0; k < a.size(); ++k) EXPECT_TRUE(torch::equal(a[k], b[k])) << "after reload, param " << k;
  }
}

// Note [A GPU's timeline]: the overlap share from GPU time, without a GPU. All-reduce kernels
// [0,10) and [20,30) µs; compute kernels [5,25) and [8,12) (overlapping each other): 5 µs of
// each all-reduce ran beside compute.
TEST(GpuTimeline, OverlapCountsAllReduceTimeWithComputeBesideIt) {
  EXPECT_DOUBLE_EQ(ddp::overlapped_us({{0, 10}, {20, 30}}, {{8, 12}, {5, 25}}), 10.0);
  EXPECT_DOUBLE_EQ(ddp::overlapped_us({{0, 10}}, {}), 0.0);
  EXPECT_DOUBLE_EQ(ddp::overlapped_us({{0, 10}}, {{10, 20}}), 0.0);   // back to back: nothing hidden
  EXPECT_DOUBLE_EQ(ddp::overlapped_us({{2, 4}}, {{0, 3}, {3, 9}}), 2.0);  // covered by two in a row
  // Only the gradient buckets' float sums count, in NCCL's names old and new (the stop vote is
  // an int max, validation sums doubles).
  EXPECT_TRUE(ddp::is_gradient_allreduce("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"));
  EXPECT_TRUE(ddp::is_gradient_allreduce("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"));
  EXPECT_FALSE(ddp::is_gradient_allreduce("ncclDevKernel_AllReduce_Max_i32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"));
  EXPECT_FALSE(ddp::is_gradient_allreduce("ncclDevKernel_AllReduce_Sum_f64_RING_LL(ncclDevKernelArgsStorage<4096ul>)"));
  EXPECT_FALSE(ddp::is_gradient_allreduce("ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)"));
}

TEST(Checkpoint, KeepsTheLastKAndLeavesNoTemporaryFiles) {
  const std::string base = temp_dir(), dir = base + "/ck";
  for (int step : {10, 20, 30, 40}) {
    ddp::save_checkpoint(dir, step, 2, [&](torch::serialize::OutputArchive& a) { a.write("v", torch::tensor(step)); });
  }
  const auto files = ddp::list_checkpoints(dir);
  ASSERT_EQ(files.size(), 2u);
  EXPECT_NE(files[0].find("ckpt-000000030.pt"), std::string::npos);
  EXPECT_NE(files[1].find("ckpt-000000040.pt"), std::string::npos);
  EXPECT_EQ(std::system(("test -z \"$(ls -A " + dir + " | grep -v '^ckpt-')\"").c_str()), 0) << "temporary files left";
  std::system(("rm -rf " + base).c_str());
}

// Note [Never lose a run]: a writer that died between write and rename left its temporary
// file; the next start removes it, and only it: a live writer's file and another host's stay.
TEST(Checkpoint, StaleTemporariesOfDeadWritersAreRemovedOthersKept) {
  const std::string dir = temp_dir();
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);  // a pid that is gone
  const std::string host = ddp::hostname(), dead = std::to_string(child), live = std::to_string(::getpid());
  const std::vector<std::string> gone = {".ckpt-000000005.pt.tmp." + host + "." + dead,
                                         ".ckpt-000000006.pt.tmp." + dead};  // the name before the host was in it
  const std::vector<std::string> kept = {".ckpt-000000007.pt.tmp." + host + "." + live,  // a live writer
                                         ".ckpt-000000008.pt.tmp.some-other-host." + dead, "ckpt-000000004.pt"};
  for (const auto& n : gone) write_file(dir + "/" + n, "x");
  for (const auto& n : kept) write_file(dir + "/" + n, "x");
  auto removed = ddp::remove_stale_temporaries(dir);
  std::sort(removed.begin(), removed.end());
  EXPECT_EQ(removed, (std::vector<std::string>{dir + "/" + gone[0], dir + "/" + gone[1]}));
  for (const auto& n : kept) EXPECT_EQ(::access((dir + "/" + n).c_str(), F_OK), 0) << n;
  std::system(("rm -rf " + dir).c_str());
}

TEST(Checkpoint, ACorruptOrTruncatedNewestIsRefusedAndThePreviousUsed) {
  const std::string base = temp_dir(), dir = base + "/ck";
  for (int step : {1, 2, 3}) {
    ddp::save_checkpoint(dir, step, 3, [&](torch::serialize::OutputArchive& a) { a.write("v", torch::tensor(step)); });
  }
  const auto files = ddp::list_checkpoints(dir);
  {  // flip one byte in the middle of the newest
    std::fstream f(files[2], std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x55');
  }
  ::truncate(files[1].c_str(), 100);  // and cut the one before short
  int64_t value = -1;
  auto loaded = ddp::load_latest_checkpoint(dir, torch::kCPU, [&](torch::serialize::InputArchive& a) {
    torch::Tensor t;
    a.read("v", t);
    value = t.item<int64_t>();
  });
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->step, 1);
  EXPECT_EQ(value, 1);
  std::system(("rm -rf " + base).c_str());
}

// ---- data ----

TEST(FashionMnist, TruncatedCorruptOrForeignFilesAreRefusedByName) {
  const std::string dir = temp_dir();
  std::string data;
  const std::string good = gzip_bytes(idx_images(3));
  EXPECT_EQ(ddp::read_idx(write_file(dir + "/good.gz", good), 3, data), (std::vector<int64_t>{3, 28, 28}));
  struct Case {
    std::string name, bytes, expect;
  };
  std::string flipped = good;
  flipped[flipped.size() / 2] ^= 0x40;
  const std::vector<Case> cases = {
      {"cut.gz", good.substr(0, good.size() / 2), "corrupt or truncated gzip data"},
      {"flipped.gz", flipped, "corrupt or truncated gzip data"},
      {"short.gz", gzip_bytes(idx_images(3).substr(0, 1000)), "truncated or padded"},
      {"labels.gz", gzip_bytes(std::string{0, 0, 8, 1, 0, 0, 0, 8} + std::string(8, '\1')), "not an IDX file of 3-dimensional bytes"},
  };
  for (const auto& c : cases) {
    const std::string path = write_file(dir + "/" + c.name, c.bytes);
    try {
      ddp::read_idx(path, 3, data);
      ADD_FAILURE() << c.name << " was accepted";
    } catch (const ddp::UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(c.expect), std::string::npos) << e.what();
    }
  }
  std::system(("rm -rf " + dir).c_str());
}

// Note [Reading only the samples a run uses]: a short run inflates the first items only, the same
// bytes as the whole file's first items; a cut file is still refused (by its gzip trailer's size),
// and the CRC is checked whenever the whole file is read.
TEST(FashionMnist, AShortRunReadsItsFirstItemsAndACutFileIsStillRefused) {
  const std::string dir = temp_dir();
  std::string raw = idx_images(50);
  for (size_t i = 16; i < raw.size(); ++i) raw[i] = static_cast<char>((i * 7919 + i / 784 * 31) % 251);  // no two images alike
  const std::string good = gzip_bytes(raw);
  const std::string path = write_file(dir + "/good.gz", good);
  std::string all, some;
  EXPECT_EQ(ddp::read_idx(path, 3, all), (std::vector<int64_t>{50, 28, 28}));
  EXPECT_EQ(ddp::read_idx(path, 3, some, 7), (std::vector<int64_t>{50, 28, 28})) << "the whole file's dimensions";
  EXPECT_EQ(some, all.substr(0, 7 * 784));
  EXPECT_EQ(ddp::read_idx(write_file(dir + "/plain", raw), 3, some, 7), (std::vector<int64_t>{50, 28, 28})) << "not gzipped";
  EXPECT_EQ(some, all.substr(0, 7 * 784));
  // A limit at or past the count reads the whole file: the CRC is checked.
  std::string flipped = good;
  flipped[flipped.size() - 12] ^= 0x40;  // in the last images' compressed bytes, far past the first
  const std::string late = write_file(dir + "/late.gz", flipped);
  EXPECT_EQ(ddp::read_idx(late, 3, some, 1), (std::vector<int64_t>{50, 28, 28}));
  EXPECT_EQ(some, all.substr(0, 784)) << "the first image, before the flipped byte";
  struct Case {
    std::string name, bytes, expect;
    int64_t first;
  };
  const std::vector<Case> refused = {
      {"late.gz", flipped, "corrupt or truncated gzip data", 50},
      {"cut.gz", good.substr(0, good.size() - 6), "truncated or corrupt: its header promises 39216 bytes, its gzip trailer records", 1},
      {"cut_plain", raw.substr(0, raw.size() - 100), "truncated or corrupt: its header promises 39216 bytes, its size is 39116", 1},
  };
  for (const Case& c : refused) {
    const std::string p = write_file(dir + "/" + c.name, c.bytes);
    try {
      ddp::read_idx(p, 3, some, c.first);
      ADD_FAILURE() << c.name << " was accepted with first " << c.first;
    } catch (const ddp::UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(p + ": " + c.expect), std::string::npos) << e.what();
    }
  }
  std::system(("rm -rf " + dir).c_str());
}

TEST(FashionMnist, TheRealFilesLoadWhenInstalled) {
  if (::access((std::string(ddp::kFashionMnistDir) + "/t10k-images-idx3-ubyte.gz").c_str(), R_OK) != 0) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  }
  auto test = ddp::load_fashion_mnist(ddp::kFashionMnistDir, false);
  EXPECT_EQ(test.size(), 10000);
  EXPECT_EQ(test.images.sizes(), (std::vector<int64_t>{10000, 1, 28, 28}));
  EXPECT_EQ(test.labels.bincount().min().item<int64_t>(), 1000);  // 1000 of each class
  EXPECT_NEAR(test.images.mean().item<double>(), 0, 0.02);       // normalised with train's stats
  // A short run's first 100, read alone, are the whole split's first 100 to the bit.
  auto first = ddp::load_fashion_mnist(ddp::kFashionMnistDir, false, 100);
  EXPECT_TRUE(torch::equal(first.images, test.images.narrow(0, 0, 100)));
  EXPECT_TRUE(torch::equal(first.labels, test.labels.narrow(0, 0, 100)));
}

// ---- TensorBoard ----

TEST(TensorBoard, Crc32cOfTheStandardCheckString) {
  EXPECT_EQ(ddp::crc32c("123456789", 9), 0xE3069283u);  // the CRC-32C check value
}

// Two ranks as two threads over Gloo: `body(rank, group)` runs on each.
void two_ranks(const std::function<void(int, ddp::Group&)>& body) {
  const std::string dir = temp_dir();
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      ddp::CommonFlags f;
      f.rank = r, f.world_size = 2, f.timeout_s = 10, f.init = "file://" + dir + "/store", f.backend = "gloo";
      ddp::Group g = ddp::init_process_group(ddp::resolve_rank_info(f));
      body(r, g);
    });
  }
  for (auto& t : ranks) t.join();
  std::system(("rm -rf " + dir).c_str());
}

double max_abs_diff(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, (a[i] - b[i]).abs().max().item<double>());
  return d;
}

// Note [SyncBatchNorm]'s claim, in closed form: two ranks holding half a batch each compute,
// through sync_batch_norm, what one BatchNorm computes on the whole batch: the output, the
// input's gradient, the parameters' gradients (summed over the ranks, as DDP's all-reduce does
// before dividing) and the running statistics. In float64, so that "equal" can mean 1e-12.
TEST(SyncBatchNorm, TwoRanksOfHalfABatchComputeWhatOneBatchNormComputesOnTheWhole) {
  torch::manual_seed(0);
  const auto f64 = torch::kFloat64;
  const torch::Tensor x = torch::randn({8, 3, 5, 5}, f64) * 2 + 3;  // a mean that is not 0
  const torch::Tensor upstream = torch::randn({8, 3, 5, 5}, f64);  // dL/dy: L = sum(y * upstream)
  const torch::Tensor weight = torch::rand({3}, f64) + 0.5, bias = torch::randn({3}, f64);  // not BatchNorm's 1 and 0
  const auto make_bn = [&] {
    auto bn = torch::nn::BatchNorm2d(3);
    bn->to(f64);
    torch::NoGradGuard g;
    bn->weight.copy_(weight), bn->bias.copy_(bias);
    return bn;
  };
  auto whole = make_bn();
  torch::Tensor xw = x.clone().requires_grad_();
  const torch::Tensor yw = whole->forward(xw);
  (yw * upstream).sum().backward();

  struct Result { torch::Tensor y, dx, dweight, dbias, running_mean, running_var; };
  std::array<Result, 2> got;
  two_ranks([&](int r, ddp::Group& g) {
    auto bn = make_bn();
    torch::Tensor xr = x.narrow(0, 4 * r, 4).clone().requires_grad_();
    const torch::Tensor y = ddp::sync_batch_norm(g)(bn, xr);
    (y * upstream.narrow(0, 4 * r, 4)).sum().backward();
    got[r] = {y.detach(), xr.grad(), bn->weight.grad(), bn->bias.grad(), bn->running_mean.clone(), bn->running_var.clone()};
  });
  const auto close = [](const torch::Tensor& a, const torch::Tensor& b) { return torch::allclose(a, b, 1e-12, 1e-12); };
  EXPECT_TRUE(close(torch::cat({got[0].y, got[1].y}), yw));
  EXPECT_TRUE(close(torch::cat({got[0].dx, got[1].dx}), xw.grad()));
  EXPECT_TRUE(close(got[0].dweight + got[1].dweight, whole->weight.grad()));
  EXPECT_TRUE(close(got[0].dbias + got[1].dbias, whole->bias.grad()));
  for (const Result& r : got) {
    EXPECT_TRUE(close(r.running_mean, whole->running_mean)) << r.running_mean << whole->running_mean;
    EXPECT_TRUE(close(r.running_var, whole->running_var)) << r.running_var << whole->running_var;
  }
}

// The same for training: the CNN with BatchNorm, 12 SGD steps with momentum, each rank on half
// of every batch and its gradients averaged, follows one process on the whole batches — with
// --sync-bn to float64 rounding; with plain BatchNorm (each rank's own statistics) it does not.
// (In float32 the two runs also part by rounding only, but the rounding grows: 1e-7 after the
// first step, 1e-4 after a dozen, as any two float32 runs that add in different orders.)
TEST(SyncBatchNorm, TwoRanksTrainAsOneProcessOnTheGlobalBatch) {
  const int steps = 12, batch = 32;
  torch::manual_seed(1);
  const torch::Tensor x = torch::randn({batch * steps, 1, 28, 28}, torch::kFloat64);
  const torch::Tensor y = torch::randint(0, 10, {batch * steps});
  const auto train = [&](ddp::Normalise norm, int rank, int world, const std::function<void(std::vector<torch::Tensor>&)>& average) {
    static std::mutex seeding;  // make_model seeds the global generator: one model at a time
    std::unique_lock<std::mutex> lock(seeding);
    ddp::AnyModel m = ddp::make_model("cnn_bn", 0, std::move(norm));
    lock.unlock();
    m.module->to(torch::kFloat64);
    std::vector<torch::Tensor> params = m.module->parameters();
    torch::optim::SGD opt(params, torch::optim::SGDOptions(0.05).momentum(0.9));
    const int per_rank = batch / world;
    for (int s = 0; s < steps; ++s) {
      opt.zero_grad();
      const int64_t from = s * batch + rank * per_rank;
      torch::nn::functional::cross_entropy(m.forward(x.narrow(0, from, per_rank)), y.narrow(0, from, per_rank)).backward();
      std::vector<torch::Tensor> grads;
      for (auto& p : params) grads.push_back(p.grad());
      average(grads);
      opt.step();
    }
    return params;
  };
  const std::vector<torch::Tensor> one = train(nullptr, 0, 1, [](auto&) {});
  std::array<std::vector<torch::Tensor>, 2> synced, plain;
  two_ranks([&](int r, ddp::Group& g) {
    const auto average = [&](std::vector<torch::Tensor>& grads) {
      for (auto& t : grads) {
        std::vector<torch::Tensor> v{t};
        g.pg->allreduce(v)->wait();
        t.div_(2);
      }
    };
    synced[r] = train(ddp::sync_batch_norm(g), r, 2, average);
    plain[r] = train(nullptr, r, 2, average);
  });
  EXPECT_LT(max_abs_diff(synced[0], one), 1e-11);
  EXPECT_EQ(max_abs_diff(synced[0], synced[1]), 0) << "the ranks should hold the same parameters";
  EXPECT_GT(max_abs_diff(plain[0], one), 1e-4) << "plain BatchNorm on half batches should not match the whole batch";
}

// JSON through the library: names and messages with quotes, backslashes, newlines, tabs and
// non-ASCII letters come back from a trace file and an error file exactly as they went in.
TEST(Json, TraceEventsAndErrorFilesKeepAnyText) {
  const std::string dir = temp_dir();
  const std::string odd = "all-reduce \"bucket\" 0\\1\nline two\ttab, Größe";
  {
    ddp::Trace t;
    t.open(dir + "/t.rank0.json", 0, "host\"x");
    t.span(odd, "comm", 1000.5, 1010.25, ddp::Trace::kComm, {{"bytes", 4096}, {"note", odd}});
    t.instant("gradient ready", "ddp", 1005, ddp::Trace::kCompute, {{"param", 3}});
    t.close();
  }
  const auto events = ddp::read_trace_events(dir + "/t.rank0.json");
  const auto span = std::find_if(events.begin(), events.end(), [](const nlohmann::json& e) { return e.value("ph", "") == "X"; });
  ASSERT_NE(span, events.end());
  EXPECT_EQ((*span)["name"], odd);
  EXPECT_EQ((*span)["args"]["note"], odd);
  EXPECT_EQ(ddp::event_number(*span, "bytes"), 4096);
  EXPECT_DOUBLE_EQ(ddp::event_number(*span, "dur"), 9.75);
  EXPECT_EQ(ddp::merge_traces({dir + "/t.rank0.json"}, dir + "/merged.json"), events.size());
  const auto merged = ddp::read_trace_events(dir + "/merged.json");
  ASSERT_EQ(merged.size(), events.size());
  EXPECT_EQ(merged[0]["args"]["name"], "rank 0 (host\"x)");

  const std::string error_file = dir + "/error.json";
  ::setenv(ddp::kErrorFileVar, error_file.c_str(), 1);
  ddp::write_error_file(odd);
  ddp::write_error_file("a second error");  // the first one wins, as torchrun expects
  ::unsetenv(ddp::kErrorFileVar);
  const auto record = ddp::read_error_file(error_file);
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->message, odd);
  EXPECT_GT(record->monotonic_s, 0);
  std::ofstream(dir + "/bad.json") << "{\"message\": 3}";
  EXPECT_FALSE(ddp::read_error_file(dir + "/bad.json").has_value());
  std::system(("rm -rf " + dir).c_str());
}

// samples/s counts the time from the end of the first step to the end of the last, less the
// pauses (validations, checkpoints) in between; a pause after the last step is outside that
// time and must not be taken off it (it was, and a resumed run of 50 steps reported twice its
// rate). Sleeps stand in for the steps: 3 timed steps of 50 ms, a 200 ms pause among them and
// a 400 ms one after the last.
TEST(Progress, ThroughputCountsTheTimedStepsLessOnlyThePausesAmongThem) {
  const std::string dir = temp_dir();
  ddp::RunOutput out(dir, 0);
  ddp::Progress progress(out, /*total_steps=*/4, /*steps_per_epoch=*/4, /*epochs=*/1, /*samples_per_step=*/100, /*every=*/100);
  auto nap = [](int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); };
  const torch::Tensor loss = torch::ones({}, torch::kFloat64);
  for (int64_t step = 0; step < 4; ++step) {
    if (step > 0) nap(50);
    if (step == 2) {
      ddp::Progress::Pause paused(progress);
      nap(200);
    }
    testing::internal::CaptureStdout();
    progress.step_done(step, loss, 0.1);
    (void)testing::internal::GetCapturedStdout();
  }
  {
    ddp::Progress::Pause paused(progress);  // the final validation
    nap(400);
  }
  testing::internal::CaptureStdout();
  progress.summary();
  const std::string printed = testing::internal::GetCapturedStdout();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(printed, m, std::regex(R"(throughput: ([0-9.]+) samples/s over 3 steps)"))) << printed;
  // 300 samples in 150 ms of steps: 2000 samples/s at most (a sleep lasts at least its time).
  // Not taking off the pause among the steps gives 857; taking off the one after them, nothing
  // (a negative time). The lower bound leaves 150 ms for a busy machine.
  EXPECT_LE(std::stod(m[1]), 2000.0) << printed;
  EXPECT_GE(std::stod(m[1]), 1000.0) << printed;
  std::system(("rm -rf " + dir).c_str());
}

// --amp fp16 scales the loss's gradient by a hook (with_scaled_gradient) where Python writes
// scaler.scale(loss).backward(): Note [Mixed precision and DDP] says the gradients are the same
// bits. Checked here in float32 on the CPU (the hook's arithmetic; autocast itself needs a GPU):
// three micro-batches accumulated, the loss divided by their number as main.cpp divides it.
TEST(Amp, AGradientScaledByAHookIsTheScaledLossesGradientBitForBit) {
  for (double s : {65536.0, 16777216.0, 0.5}) {
    std::vector<std::vector<torch::Tensor>> grads;
    for (bool hook : {false, true}) {
      torch::manual_seed(7);
      ddp::Mlp model;
      const torch::Tensor scale = torch::full({1}, s);
      for (int b = 0; b < 3; ++b) {
        torch::manual_seed(100 + b);
        const torch::Tensor images = torch::rand({16, 1, 28, 28}), labels = torch::randint(0, 10, {16});
        torch::Tensor ce = torch::nn::functional::cross_entropy(model->forward(images), labels);
        if (hook) {
          (ddp::with_scaled_gradient(ce, scale) / 3.0).backward();
        } else {
          ((ce / 3.0) * scale).backward();  // scaler.scale(loss).backward()
        }
      }
      grads.emplace_back();
      for (const auto& p : model->parameters()) grads.back().push_back(p.grad().clone());
    }
    ASSERT_EQ(grads[0].size(), grads[1].size());
    for (size_t i = 0; i < grads[0].size(); ++i) {
      EXPECT_TRUE(torch::equal(grads[0][i], grads[1][i])) << "scale " << s << ", parameter " << i << ": max difference "
                                                         << (grads[0][i] - grads[1][i]).abs().max().item<double>();
    }
    EXPECT_GT(grads[1][0].abs().max().item<double>(), 0.0);
  }
}
