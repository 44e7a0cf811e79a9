// The DDP step simulator (bench/ddp_sim.h): its closed forms, its buckets against chapter 05's
// assign_buckets, its speed at 1,024 GPUs, and the tool's refusals (exit 2, naming the flag).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <regex>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "05_ddp/ddp.h"
#include "bench/ddp_sim.h"
#include "bench/ddp_sim_presets.h"
#include "bench/fault_cost.h"
#include "common/basics/errors.h"
#include "common/observe/trace.h"
#include "proc.h"

using namespace ddp_test;
namespace sim = ddp::sim;

namespace {

constexpr size_t kKiB = 1024;

// A small model by hand (the profiles of bench/profiles/ are not a test's input): conv1, a relu
// without parameters, fc1, fc2; registration order conv1.weight, conv1.bias, fc1.weight, ...
// Backward FLOPs 2 + 1 + 4 + 2 = 9, forward 1 + 1 + 2 + 1 = 5.
nlohmann::json tiny_json() {
  return nlohmann::json::parse(R"({
    "model": "tiny", "source": "by hand", "input": [3, 32, 32], "flops_per": "sample",
    "parameters": [
      {"name": "conv1.weight", "numel": 153600, "bytes": 614400, "layer": "conv1"},
      {"name": "conv1.bias", "numel": 256, "bytes": 1024, "layer": "conv1"},
      {"name": "fc1.weight", "numel": 524288, "bytes": 2097152, "layer": "fc1"},
      {"name": "fc1.bias", "numel": 1024, "bytes": 4096, "layer": "fc1"},
      {"name": "fc2.weight", "numel": 102400, "bytes": 409600, "layer": "fc2"},
      {"name": "fc2.bias", "numel": 10, "bytes": 40, "layer": "fc2"}],
    "layers": [
      {"name": "conv1", "type": "Conv2d", "forward_flops": 1, "backward_flops": 2},
      {"name": "relu", "type": "ReLU", "forward_flops": 1, "backward_flops": 1},
      {"name": "fc1", "type": "Linear", "forward_flops": 2, "backward_flops": 4},
      {"name": "fc2", "type": "Linear", "forward_flops": 1, "backward_flops": 2}]})");
}
sim::Profile tiny() { return sim::parse_profile(tiny_json(), "tiny.json"); }

double total_bytes(const sim::Profile& p) {
  double b = 0;
  for (const auto& q : p.parameters) b += static_cast<double>(q.bytes);
  return b;
}

sim::Network network(double intra_bytes_per_s, double inter_bytes_per_s, double intra_latency, double inter_latency) {
  sim::Network n;
  n.intra = {intra_bytes_per_s, intra_latency};
  n.inter = {inter_bytes_per_s, inter_latency};
  return n;
}

sim::Options compute(double s) {
  sim::Options o;
  o.compute_s = s;
  return o;
}

}  // namespace

TEST(DdpSim, OneGpuStepIsItsComputeWithoutCommunication) {
  const auto r = sim::simulate(tiny(), {1, 1}, network(1e9, 1e9, 1e-5, 1e-5), compute(0.1));
  EXPECT_DOUBLE_EQ(r.step_s, 0.1);
  EXPECT_EQ(r.comm_s, 0);
  EXPECT_EQ(r.exposed_comm_s, 0);
  EXPECT_DOUBLE_EQ(r.efficiency, 1);
  // Forward and backward split 5 : 9 by the FLOPs.
  EXPECT_NEAR(r.forward_s, 0.1 * 5 / 14, 1e-15);
  EXPECT_NEAR(r.backward_end_s, 0.1, 1e-15);
}

TEST(DdpSim, InfiniteBandwidthAndNoLatencyLeaveOnlyDdpsOwnCosts) {
  sim::Options o = compute(0.1);
  o.optimizer_s = 0.01, o.per_param_s = 10e-6, o.per_bucket_s = 20e-6, o.copy_bytes_per_s = 1e9;
  const sim::Profile p = tiny();
  const auto r = sim::simulate(p, {16, 8}, network(INFINITY, INFINITY, 0, 0), o);
  ASSERT_EQ(r.buckets.size(), 2u);  // {fc2.bias .. fc1.weight} (>= 1 MiB), {conv1.bias, conv1.weight}
  EXPECT_EQ(r.comm_s, 0);
  // 6 hooks, 2 launches, every byte copied in and out.
  const double costs = 6 * 10e-6 + 2 * 20e-6 + 2 * total_bytes(p) / 1e9;
  EXPECT_NEAR(r.ddp_overhead_s, costs, 1e-15);
  EXPECT_NEAR(r.step_s, 0.1 + costs, 1e-15);
  EXPECT_NEAR(r.efficiency, 0.1 / (0.1 + costs), 1e-15);
}

// Note [The slowest rank]: E[max of n standard normals] against its closed forms at 2 and 3
// (1/sqrt(pi), 3/(2 sqrt(pi))) and the tabulated 1.0293754 at 4 and 1.4236003 at 8; then a step
// with free communication computes 1 + s E[max] times as long, every part of the compute, and
// its efficiency is taken against the compute given. One rank has no one to wait for.
TEST(DdpSim, TheSlowestOfTheRanksComputesForTheExpectedMaximum) {
  EXPECT_EQ(sim::expected_max_of_normals(1), 0);
  EXPECT_NEAR(sim::expected_max_of_normals(2), 1 / std::sqrt(M_PI), 1e-9);
  EXPECT_NEAR(sim::expected_max_of_normals(3), 3 / (2 * std::sqrt(M_PI)), 1e-9);
  EXPECT_NEAR(sim::expected_max_of_normals(4), 1.0293754, 1e-7);
  EXPECT_NEAR(sim::expected_max_of_normals(8), 1.4236003, 1e-7);
  sim::Options o = compute(0.1);
  o.optimizer_s = 0.01, o.rank_spread = 0.02;
  const sim::Profile p = tiny();
  const auto r = sim::simulate(p, {2, 4}, network(INFINITY, INFINITY, 0, 0), o);
  const double slowest = 1 + 0.02 * sim::expected_max_of_normals(8);
  EXPECT_NEAR(r.step_s, 0.1 * slowest, 1e-15);
  EXPECT_NEAR(r.slowest_rank_s, 0.1 * (slowest - 1), 1e-15);
  EXPECT_NEAR(r.forward_s + r.backward_compute_s, 0.09 * slowest, 1e-15);
  EXPECT_NEAR(r.efficiency, 1 / slowest, 1e-15);
  EXPECT_EQ(sim::simulate(p, {1, 1}, network(INFINITY, INFINITY, 0, 0), o).step_s, 0.1);
  o.rank_spread = 1;
  EXPECT_THROW(sim::simulate(p, {2, 4}, network(INFINITY, INFINITY, 0, 0), o), std::invalid_argument);
}

TEST(DdpSim, OneBucketExposesTheWholeAllReduce) {
  sim::Options o = compute(0.1);
  o.bucketing = sim::Bucketing::first_iteration;
  const sim::Profile p = tiny();
  const sim::World w{1, 8};
  const sim::Network n = network(10e9, 10e9, 5e-6, 5e-6);
  const auto r = sim::simulate(p, w, n, o);
  ASSERT_EQ(r.buckets.size(), 1u);
  const double t = sim::allreduce(w, n, total_bytes(p)).total();
  EXPECT_DOUBLE_EQ(r.comm_s, t);
  EXPECT_NEAR(r.exposed_comm_s, t, 1e-15);
  EXPECT_NEAR(r.overlap_share, 0, 1e-12);
  EXPECT_NEAR(r.step_s, 0.1 + t, 1e-15);
  EXPECT_DOUBLE_EQ(r.buckets[0].ready_s, r.backward_end_s);
}

TEST(DdpSim, GradientsThatAllArriveAtTheEndOverlapNothing) {
  // Every parameter belongs to the first layer, whose backward takes no time and runs last.
  nlohmann::json j = tiny_json();
  for (auto& q : j["parameters"]) q["layer"] = "conv1";
  for (auto& l : j["layers"]) l["backward_flops"] = l["name"] == "conv1" ? 0 : 3;
  const sim::Profile p = sim::parse_profile(j, "late.json");
  sim::Options o = compute(0.1);
  o.first_bucket_bytes = o.bucket_cap_bytes = 1;  // a bucket per gradient, all ready at once
  const auto r = sim::simulate(p, {2, 4}, network(10e9, 1e9, 5e-6, 20e-6), o);
  EXPECT_EQ(r.buckets.size(), 6u);
  EXPECT_GT(r.comm_s, 0);
  EXPECT_NEAR(r.exposed_comm_s, r.comm_s, 1e-15);
  EXPECT_NEAR(r.overlap_share, 0, 1e-12);
  for (const auto& b : r.buckets) EXPECT_DOUBLE_EQ(b.ready_s, r.backward_end_s);
}

// --comm-hook fp16: the same buckets (cut by float32 bytes), half the bytes on the wire: the
// bandwidth term halves, the latency term (the ring's 2(p-1) steps) does not.
TEST(DdpSim, Fp16HookHalvesTheBandwidthTermNotTheLatency) {
  const sim::Profile p = tiny();
  const sim::World w{2, 1};
  const sim::Network n = network(10e9, 12.5e6, 5e-6, 500e-6);  // 100 Mbit/s between two hosts
  sim::Options o = compute(0.1);
  const auto plain = sim::simulate(p, w, n, o);
  o.fp16_hook = true;
  const auto half = sim::simulate(p, w, n, o);
  ASSERT_EQ(half.buckets.size(), plain.buckets.size());
  for (size_t b = 0; b < plain.buckets.size(); ++b) {
    EXPECT_EQ(half.buckets[b].bytes, plain.buckets[b].bytes);
    EXPECT_DOUBLE_EQ(half.buckets[b].latency_s, 2 * 500e-6);
    EXPECT_DOUBLE_EQ(half.buckets[b].bandwidth_s, plain.buckets[b].bandwidth_s / 2);
    // ring(2, n/2): 2 steps of n/4 bytes at 12.5 MB/s.
    EXPECT_NEAR(half.buckets[b].bandwidth_s, plain.buckets[b].bytes / 2.0 / 12.5e6, 1e-15);
  }
}

// Note [Compute beside an all-reduce] at its extreme: an interference without bound stops
// backward while any all-reduce runs, so the step is compute plus every all-reduce, nothing
// hidden, whatever the buckets (Gloo on cores that all compute, in the limit).
TEST(DdpSim, AnUnboundedInterferenceHidesNothing) {
  const sim::Profile p = tiny();
  const sim::World w{1, 2};
  const sim::Network n = network(1e9, 1e9, 200e-6, 200e-6);
  sim::Options o = compute(0.1);
  o.optimizer_s = 0.01;
  const auto overlapped = sim::simulate(p, w, n, o);
  EXPECT_GT(overlapped.overlap_share, 0.5);  // on engines of its own most of it hides: the contrast
  o.interference = 1e9;
  const auto r = sim::simulate(p, w, n, o);
  ASSERT_EQ(r.buckets.size(), 2u);
  double by_hand = 0;
  for (const auto& b : r.buckets) by_hand += sim::allreduce(w, n, static_cast<double>(b.bytes)).total();
  EXPECT_NEAR(r.comm_s, by_hand, 1e-15);
  EXPECT_NEAR(r.step_s, 0.1 + by_hand, 1e-9);  // backward crawls 1e-9 of its speed beside them
  EXPECT_NEAR(r.interference_s + r.exposed_comm_s, by_hand, 1e-9);
  for (const auto& b : r.buckets) EXPECT_DOUBLE_EQ(b.start_s, b.ready_s);  // nothing queued: backward was stopped
}

// Note [Compute beside an all-reduce], the all-reduce's side, by hand on TheTimelineOfTwoBuckets'
// step: bucket 0 (2.519 ms alone) starts at 11 ms; beside backward at half speed (slowdown 1) it
// does 1.5 ms of its work by backward's end at 14 ms, and the other 1.019 ms at full speed;
// bucket 1, ready at 14 ms, queues behind it.
TEST(DdpSim, AnAllReduceBesideBackwardIsSlowedThenRunsOnAtFullSpeed) {
  const sim::Profile p = tiny();
  const sim::World w{1, 2};
  const sim::Network n = network(1e9, 1e9, 0, 0);
  const double b0 = 40 + 409600 + 4096 + 2097152, b1 = 1024 + 614400;
  sim::Options o = compute(14e-3);
  o.allreduce_slowdown = 1;
  const auto r = sim::simulate(p, w, n, o);
  ASSERT_EQ(r.buckets.size(), 2u);
  EXPECT_NEAR(r.backward_end_s, 14e-3, 1e-15);  // backward itself undisturbed (interference 0)
  EXPECT_NEAR(r.buckets[0].end_s, 14e-3 + (b0 / 1e9 - 1.5e-3), 1e-15);
  EXPECT_NEAR(r.buckets[1].start_s, r.buckets[0].end_s, 1e-15);
  EXPECT_NEAR(r.buckets[1].end_s, r.buckets[0].end_s + b1 / 1e9, 1e-15);
  EXPECT_NEAR(r.step_s, r.buckets[1].end_s, 1e-15);
  EXPECT_NEAR(r.comm_s, (r.buckets[0].end_s - 11e-3) + b1 / 1e9, 1e-15);
  // An all-reduce that ends within backward takes (1 + a) its time: on a fast link, 0.252 ms.
  const auto fast = sim::simulate(p, w, network(10e9, 10e9, 0, 0), o);
  EXPECT_NEAR(fast.buckets[0].end_s - fast.buckets[0].start_s, 2 * b0 / 10e9, 1e-15);
  o.allreduce_slowdown = -1;
  EXPECT_THROW(sim::simulate(p, w, n, o), std::invalid_argument);
}

// --stop-vote (Note [The wire and the cores]): 05's 4-byte all-reduce after each step runs beside
// the next step, read at its end. On engines of its own it costs the step nothing; beside a
// compute it slows it by the interference while it runs; the step waits only for what outlasts it.
TEST(DdpSim, TheStopVoteRunsBesideTheNextStepAndSlowsIt) {
  const sim::Profile p = tiny();
  const sim::World w{1, 2};
  const sim::Network n = network(1e9, 1e9, 200e-6, 200e-6);
  sim::Options o = compute(0.1);
  const auto plain = sim::simulate(p, w, n, o);
  EXPECT_EQ(plain.vote_s, 0);
  o.stop_vote = true;
  const auto voted = sim::simulate(p, w, n, o);
  const double vote = 2 * 200e-6 + 4 / 1e9;  // ring(2, 4 B): 2 steps of 2 bytes at 1 GB/s
  EXPECT_NEAR(voted.vote_s, vote, 1e-15);
  EXPECT_NEAR(voted.vote_latency_s, 2 * 200e-6, 1e-18);
  EXPECT_DOUBLE_EQ(voted.step_s, plain.step_s);  // hidden: the step is unchanged
  EXPECT_NEAR(voted.comm_s, plain.comm_s + vote, 1e-15);
  EXPECT_DOUBLE_EQ(voted.exposed_comm_s, plain.exposed_comm_s);
  // Beside the compute, slowed by s = 1 and a = 1: the vote takes 2v, forward does v of its work
  // in that time, and the step is v longer (on a link fast enough that the buckets' all-reduces
  // start long after the vote has ended).
  const sim::Network fast = network(1e12, 1e12, 200e-6, 200e-6);
  o.stop_vote = false, o.interference = 1, o.allreduce_slowdown = 1;
  const auto slowed = sim::simulate(p, w, fast, o);
  o.stop_vote = true;
  const auto slowed_voted = sim::simulate(p, w, fast, o);
  const double fast_vote = 2 * 200e-6 + 4 / 1e12;
  ASSERT_LT(2 * fast_vote, slowed_voted.forward_s);
  EXPECT_NEAR(slowed_voted.vote_s, 2 * fast_vote, 1e-15);
  EXPECT_NEAR(slowed_voted.interference_s, slowed.interference_s + fast_vote, 1e-15);
  EXPECT_NEAR(slowed_voted.step_s, slowed.step_s + fast_vote, 1e-12);
  ASSERT_FALSE(slowed_voted.slowed.empty());
  EXPECT_EQ(slowed_voted.slowed.front().first, 0);  // forward, from the step's start
  EXPECT_NEAR(slowed_voted.slowed.front().second, 2 * fast_vote, 1e-15);
  // A vote longer than forward does not hold backward back: backward starts when forward ends,
  // the buckets do not queue behind it, and it ends within the step.
  o.interference = 0, o.allreduce_slowdown = 0;
  const sim::Network slow = network(1e9, 1e9, 0.1, 0.1);
  const auto long_vote = sim::simulate(p, w, slow, o);
  o.stop_vote = false;
  const auto no_vote = sim::simulate(p, w, slow, o);
  ASSERT_LT(long_vote.forward_s, long_vote.vote_s);
  ASSERT_LT(long_vote.vote_s, no_vote.step_s);
  EXPECT_DOUBLE_EQ(long_vote.step_s, no_vote.step_s);
  EXPECT_EQ(long_vote.vote_exposed_s, 0);
  // One that outlasts the whole step (1,001 times as long beside the compute; one bucket, all-reduced
  // after backward at full speed): the step waits for it.
  o.stop_vote = true, o.allreduce_slowdown = 1000, o.bucketing = sim::Bucketing::first_iteration;
  const auto outlasting = sim::simulate(p, w, n, o);
  EXPECT_NEAR(outlasting.vote_s, 1001 * vote, 1e-15);
  ASSERT_LT(outlasting.buckets.back().end_s, outlasting.vote_s);
  EXPECT_DOUBLE_EQ(outlasting.step_s, outlasting.vote_s);
  EXPECT_NEAR(outlasting.vote_exposed_s, outlasting.vote_s - outlasting.buckets.back().end_s, 1e-15);
  o.bucketing = sim::Bucketing::rebuilt;
  // One rank: nothing to vote with.
  o.allreduce_slowdown = 0;
  EXPECT_EQ(sim::simulate(p, {1, 1}, n, o).vote_s, 0);
}

// Note [The simulated step as a trace]: the events 05's --trace writes, at the simulated times.
TEST(DdpSim, TheSimulatedStepIsATraceIn05sEvents) {
  const sim::Profile p = tiny();
  sim::Options o = compute(14e-3);
  o.interference = 1, o.stop_vote = true;
  const sim::Network n = network(1e9, 1e9, 0, 0);
  const auto r = sim::simulate(p, {1, 2}, n, o);
  const nlohmann::json t = sim::trace_of(p, r, o);
  std::map<std::string, std::vector<nlohmann::json>> by_name;
  for (const auto& e : t.at("traceEvents")) by_name[e.at("name").get<std::string>()].push_back(e);
  const auto ts = [](const nlohmann::json& e) { return e.at("ts").get<double>(); };
  const auto end = [&](const nlohmann::json& e) { return ts(e) + e.value("dur", 0.0); };
  ASSERT_EQ(by_name["forward"].size(), 1u);
  EXPECT_EQ(ts(by_name["forward"][0]), 0);
  ASSERT_EQ(by_name["backward"].size(), 1u);
  EXPECT_NEAR(end(by_name["backward"][0]), r.backward_end_s * 1e6, 1e-3);
  for (const char* layer : {"backward conv1", "backward relu", "backward fc1", "backward fc2"}) EXPECT_EQ(by_name[layer].size(), 1u) << layer;
  ASSERT_EQ(by_name["gradient ready"].size(), p.parameters.size());
  for (const auto& e : by_name["gradient ready"]) {
    const size_t i = e.at("args").at("param").get<size_t>();
    EXPECT_EQ(e.at("args").at("bytes").get<size_t>(), p.parameters[i].bytes);
    EXPECT_NEAR(ts(e), r.grad_ready_s[i] * 1e6, 1e-3);
  }
  for (size_t b = 0; b < r.buckets.size(); ++b) {
    const auto& e = by_name["all-reduce bucket" + std::to_string(b)];
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].at("tid"), 1);
    EXPECT_NEAR(ts(e[0]), r.buckets[b].start_s * 1e6, 1e-3);
    EXPECT_NEAR(end(e[0]), r.buckets[b].end_s * 1e6, 1e-3);
  }
  ASSERT_EQ(by_name["all-reduce stop vote"].size(), 1u);
  // Forward slowed beside the vote, backward where bucket 0 ran beside it.
  ASSERT_EQ(by_name["slowed beside an all-reduce"].size(), r.slowed.size());
  ASSERT_GE(r.slowed.size(), 2u);
  EXPECT_FALSE(by_name["step done"][0].contains("dur"));  // an instant
  EXPECT_NEAR(ts(by_name["step done"][0]), r.step_s * 1e6, 1e-3);
  // Undisturbed: nothing slowed.
  o.interference = 0;
  const nlohmann::json plain = sim::trace_of(p, sim::simulate(p, {1, 2}, n, o), o);
  for (const auto& e : plain.at("traceEvents")) EXPECT_NE(e.at("name"), "slowed beside an all-reduce");
}

TEST(DdpSim, RingAndHierarchicalAllReduceByHand) {
  // A ring over 8 ranks, 100 MB at 10 GB/s, 5 us a step: 14 steps of latency, 14/8 of the bytes.
  const auto t = sim::ring_allreduce(8, 100e6, {10e9, 5e-6});
  EXPECT_NEAR(t.latency_s, 14 * 5e-6, 1e-18);
  EXPECT_NEAR(t.bandwidth_s, 14.0 / 8 * 100e6 / 10e9, 1e-15);
  EXPECT_NEAR(t.total(), 70e-6 + 0.0175, 1e-15);
  const sim::Network n = network(10e9, 2e9, 5e-6, 20e-6);
  // One node: both algorithms are the ring within it.
  EXPECT_DOUBLE_EQ(sim::allreduce({1, 8}, n, 100e6).total(), t.total());
  sim::Network h = n;
  h.algorithm = sim::Algorithm::hierarchical;
  EXPECT_DOUBLE_EQ(sim::allreduce({1, 8}, h, 100e6).total(), t.total());
  // Two nodes of 8, flat ring: 30 steps at the slowest hop (20 us, 2 GB/s).
  EXPECT_NEAR(sim::allreduce({2, 8}, n, 100e6).total(), 30 * 20e-6 + 30.0 / 16 * 100e6 / 2e9, 1e-12);
  // Hierarchical: reduce-scatter and all-gather in the node (2*7 steps of 5 us, 2*7/8 of the
  // bytes at 10 GB/s), a ring of 2 nodes between them (2 steps of 20 us, 2*1/2 of the bytes at 2 GB/s).
  EXPECT_NEAR(sim::allreduce({2, 8}, h, 100e6).total(), 14 * 5e-6 + 14.0 / 8 * 100e6 / 10e9 + 2 * 20e-6 + 100e6 / 2e9, 1e-12);
  // One GPU per node: the ring between nodes either way.
  EXPECT_DOUBLE_EQ(sim::allreduce({4, 1}, h, 100e6).total(), sim::ring_allreduce(4, 100e6, n.inter).total());
  EXPECT_DOUBLE_EQ(sim::allreduce({4, 1}, n, 100e6).total(), sim::ring_allreduce(4, 100e6, n.inter).total());
}

TEST(DdpSim, BucketsAreChapter05sAssignBucketsOverTheReadyOrder) {
  const sim::Profile p = tiny();
  std::vector<size_t> sizes;
  for (const auto& q : p.parameters) sizes.push_back(q.bytes);
  // Reverse layer order, and within a layer reverse registration order.
  const std::vector<size_t> ready{5, 4, 3, 2, 1, 0};
  EXPECT_EQ(sim::ready_order(p), ready);
  sim::Options o = compute(0.1);
  for (size_t cap : {size_t(1), 512 * kKiB, 25 * sim::kMiB}) {
    o.bucket_cap_bytes = cap;
    EXPECT_EQ(sim::bucket_assignment(p, o), ddp::assign_buckets(ready, sizes, ddp::kFirstBucketBytes, cap)) << cap;
  }
  // At 25 MiB, by hand: 40 B + 400 KiB + 4 KiB + 2 MiB reach the first 1 MiB; the rest is one bucket.
  o.bucket_cap_bytes = 25 * sim::kMiB;
  EXPECT_EQ(sim::bucket_assignment(p, o), (std::vector<std::vector<size_t>>{{5, 4, 3, 2}, {1, 0}}));
  o.bucketing = sim::Bucketing::first_iteration;
  EXPECT_EQ(sim::bucket_assignment(p, o), (std::vector<std::vector<size_t>>{{0, 1, 2, 3, 4, 5}}));
  // PyTorch 1.4: cut in registration order (600 KiB + 1 KiB + 2 MiB reach 1 MiB), launched reversed.
  o.bucketing = sim::Bucketing::pytorch_1_4;
  EXPECT_EQ(sim::bucket_assignment(p, o), (std::vector<std::vector<size_t>>{{3, 4, 5}, {0, 1, 2}}));
}

TEST(DdpSim, TheTimelineOfTwoBucketsByHand) {
  // 14 ms of compute: forward 5 ms, backward 9 ms (1 ms per backward FLOP). fc2 and fc1 end at
  // 5 + 2 + 4 = 11 ms: bucket 0 (2,519,128 bytes) is ready; relu and conv1 end at 14 ms: bucket 1.
  const sim::Profile p = tiny();
  const sim::World w{1, 2};
  const sim::Network n = network(1e9, 1e9, 0, 0);  // world 2: T = n / 1e9
  const auto r = sim::simulate(p, w, n, compute(14e-3));
  ASSERT_EQ(r.buckets.size(), 2u);
  const double b0 = 40 + 409600 + 4096 + 2097152, b1 = 1024 + 614400;
  EXPECT_NEAR(r.buckets[0].ready_s, 11e-3, 1e-15);
  EXPECT_NEAR(r.buckets[0].start_s, 11e-3, 1e-15);
  EXPECT_NEAR(r.buckets[0].end_s, 11e-3 + b0 / 1e9, 1e-15);  // 2.52 ms: hidden behind the last 3 ms
  EXPECT_NEAR(r.buckets[1].ready_s, 14e-3, 1e-15);
  EXPECT_NEAR(r.buckets[1].end_s, 14e-3 + b1 / 1e9, 1e-15);
  EXPECT_NEAR(r.exposed_comm_s, b1 / 1e9, 1e-15);
  EXPECT_NEAR(r.overlap_share, b0 / (b0 + b1), 1e-12);
  // A slower link: bucket 0 outlasts backward, and bucket 1 queues behind it.
  const auto slow = sim::simulate(p, w, network(0.5e9, 0.5e9, 0, 0), compute(14e-3));
  EXPECT_NEAR(slow.buckets[1].start_s, 11e-3 + b0 / 0.5e9, 1e-15);
  EXPECT_NEAR(slow.step_s, 11e-3 + (b0 + b1) / 0.5e9, 1e-15);
}

// Note [Compute beside an all-reduce], by hand on the timeline above: bucket 0's all-reduce runs
// 11 -> 13.52 ms; at half speed beside it (interference 1) relu's 1 ms of backward ends at 13
// ms, and conv1's 2 ms do 0.26 ms of theirs by 13.52 ms and the rest after: backward ends at
// 15.26 ms, 1.26 ms later; bucket 1 then all-reduces its 0.615 ms.
TEST(DdpSim, BackwardBesideAnAllReduceIsSlowedOnlyWhileItRuns) {
  const sim::Profile p = tiny();
  const sim::World w{1, 2};
  const sim::Network n = network(1e9, 1e9, 0, 0);
  sim::Options o = compute(14e-3);
  const double b0 = 40 + 409600 + 4096 + 2097152, b1 = 1024 + 614400;
  o.interference = 1;
  const auto r = sim::simulate(p, w, n, o);
  const double window = b0 / 1e9;  // 2.519 ms
  const double end = 11e-3 + window + (2e-3 - (window - 2e-3) / 2);
  EXPECT_NEAR(r.backward_end_s, end, 1e-15);
  EXPECT_NEAR(r.interference_s, end - 14e-3, 1e-15);
  EXPECT_NEAR(r.buckets[1].ready_s, end, 1e-15);
  EXPECT_NEAR(r.step_s, end + b1 / 1e9, 1e-15);
  // Nothing to slow: one GPU, or no all-reduce in flight; and 0 is the undisturbed step, bit for bit.
  EXPECT_EQ(sim::simulate(p, {1, 1}, n, o).interference_s, 0);
  o.interference = 0;
  EXPECT_EQ(sim::simulate(p, w, n, o).step_s, sim::simulate(p, w, n, compute(14e-3)).step_s);
  o.interference = -0.5;
  EXPECT_THROW(sim::simulate(p, w, n, o), std::invalid_argument);
  // A world past one GPU with a large share: the interference is most of what DDP adds.
  o.interference = 100;
  const auto big = sim::simulate(p, w, n, o);
  EXPECT_NEAR(big.backward_end_s, 11e-3 + window + 3e-3 - window / 101, 1e-15);
}

// A measured backward (--backward-ms) sets the split; the FLOPs still divide it among the layers.
// The same 14 ms with backward given as 6 ms: forward 8 ms, then fc2 and fc1 take 6 * 6/9 = 4 ms.
TEST(DdpSim, AMeasuredBackwardSplitsTheComputeAndTheFlopsDivideIt) {
  const sim::Profile p = tiny();
  sim::Options o = compute(14e-3);
  o.backward_s = 6e-3;
  const auto r = sim::simulate(p, {1, 2}, network(1e9, 1e9, 0, 0), o);
  EXPECT_NEAR(r.forward_s, 8e-3, 1e-15);
  EXPECT_NEAR(r.backward_compute_s, 6e-3, 1e-15);
  ASSERT_EQ(r.buckets.size(), 2u);
  EXPECT_NEAR(r.buckets[0].ready_s, 12e-3, 1e-15);
  EXPECT_NEAR(r.buckets[1].ready_s, 14e-3, 1e-15);
  o.optimizer_s = 8e-3;  // forward and backward have 6 ms between them: backward cannot take all
  EXPECT_THROW(sim::simulate(p, {1, 2}, network(1e9, 1e9, 0, 0), o), std::invalid_argument);
}

TEST(DdpSim, DeterministicAndFastAt1024Gpus) {
  // A model of 320 parameters over 160 layers (a ResNet's count), at 128 nodes x 8 GPUs.
  nlohmann::json j = {{"model", "many"}};
  for (int l = 0; l < 160; ++l) {
    const std::string name = "layer" + std::to_string(l);
    j["layers"].push_back({{"name", name}, {"type", "Conv2d"}, {"forward_flops", 1e9 + l}, {"backward_flops", 2e9 + l}});
    j["parameters"].push_back({{"name", name + ".weight"}, {"numel", 65536 * (l % 7 + 1)}, {"bytes", 262144 * (l % 7 + 1)}, {"layer", name}});
    j["parameters"].push_back({{"name", name + ".bias"}, {"numel", 256}, {"bytes", 1024}, {"layer", name}});
  }
  const sim::Profile p = sim::parse_profile(j, "many.json");
  sim::Network n = network(100e9, 50e9, 5e-6, 10e-6);
  sim::Options o = compute(0.1);
  o.per_param_s = 10e-6, o.copy_bytes_per_s = 500e9;
  for (auto algorithm : {sim::Algorithm::ring, sim::Algorithm::hierarchical}) {
    n.algorithm = algorithm;
    const auto t0 = std::chrono::steady_clock::now();
    const auto a = sim::simulate(p, {128, 8}, n, o);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(took, 0.5);
    const auto b = sim::simulate(p, {128, 8}, n, o);
    EXPECT_EQ(a.step_s, b.step_s);
    EXPECT_EQ(a.exposed_comm_s, b.exposed_comm_s);
    ASSERT_EQ(a.buckets.size(), b.buckets.size());
    for (size_t k = 0; k < a.buckets.size(); ++k) {
      EXPECT_EQ(a.buckets[k].end_s, b.buckets[k].end_s);
      EXPECT_EQ(a.buckets[k].params, b.buckets[k].params);
    }
    EXPECT_GT(a.step_s, 0.1);
    EXPECT_GT(a.efficiency, 0);
    EXPECT_LT(a.efficiency, 1);
  }
}

TEST(DdpSim, AProfileWithoutAFieldNamesTheFileAndTheField) {
  nlohmann::json j = tiny_json();
  j["parameters"][2].erase("bytes");
  try {
    sim::parse_profile(j, "broken.json");
    FAIL() << "no UsageError";
  } catch (const ddp::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("broken.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("parameters[2]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("bytes"), std::string::npos) << e.what();
  }
  j = tiny_json();
  j["parameters"][0]["layer"] = "conv9";
  EXPECT_THROW(sim::parse_profile(j, "x.json"), ddp::UsageError);
  EXPECT_THROW(sim::read_profile("/nonexistent/profile.json"), ddp::UsageError);
  EXPECT_THROW(sim::simulate(tiny(), {1, 0}, network(1e9, 1e9, 0, 0), compute(0.1)), std::invalid_argument);
  EXPECT_THROW(sim::simulate(tiny(), {1, 2}, network(0, 1e9, 0, 0), compute(0.1)), std::invalid_argument);
}

TEST(DdpSim, TheToolPrintsTheStepAndRefusesBadFlagsWithExit2) {
  const std::string dir = temp_dir();
  const std::string good = dir + "/tiny.json", bad = dir + "/bad.json";
  std::ofstream(good) << tiny_json().dump();
  std::ofstream(bad) << R"({"model": "x", "parameters": [)";
  const std::vector<std::string> base{"ddp_sim", "--compute-ms", "14"};
  // --model finds tiny.json in --profiles-dir; the preset fills the network, --intra-gbps overrides it.
  const ProcResult ok = run_one({plus(base, {"--profiles-dir", dir, "--model", "tiny", "--preset", "dgx-v100", "--intra-gbps", "800",
                                             "--nodes", "128", "--gpus-per-node", "8", "--timeline", "--comm-hook", "fp16",
                                             "--measured-ms", "20", "--stop-vote", "--trace", dir + "/step.json"})}, 30);
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  for (const std::string& line : std::vector<std::string>{"step: ", "backward end: ", "all-reduce: ", "overlap share: ", "scaling efficiency: ", "dominant term: ",
                           "preset dgx-v100: ", "within a node 800 Gb/s, 5 us; between nodes 320 Gb/s, 10 us",
                           "all-reduced as float16 (--comm-hook fp16)", "measured: 20.000 ms; predicted ",
                           "stop vote: 20.460 ms (one all-reduce of 4 bytes", "(the preset's share, cited)", "interference: compute ",
                           "trace: " + dir + "/step.json"}) {
    EXPECT_NE(ok.output.find(line), std::string::npos) << line << "\n" << ok.output;
  }
  // The trace reads as 05's do (a merged trace: Note [Trace files]).
  EXPECT_GT(ddp::read_trace_events(dir + "/step.json").size(), 10u);
  const std::vector<std::pair<std::vector<std::string>, std::string>> refused{
      {{"--gpus-per-node", "0"}, "--gpus-per-node"},   {{"--intra-gbps", "0"}, "--intra-gbps"},
      {{"--inter-gbps", "-1"}, "--inter-gbps"},        {{"--algorithm", "tree"}, "--algorithm"},
      {{"--profile", dir + "/none.json"}, "--profile"}, {{"--profile", bad}, "--profile"},
      {{"--preset", "dgx-x"}, "dgx-v100, a100-8, h100-8"}, {{"--model", "nosuch", "--profiles-dir", dir}, "--model nosuch"},
      {{"--comm-hook", "fp32"}, "--comm-hook"},        {{"--measured-ms", "0"}, "--measured-ms"},
      {{"--backward-ms", "14"}, "--backward-ms"},      {{"--backward-ms", "-1"}, "--backward-ms"},
      {{"--interference", "-0.1"}, "--interference"},  {{"--allreduce-slowdown", "nan"}, "--allreduce-slowdown"},
      {{"--rank-spread", "1.5"}, "--rank-spread"},       {{"--ranks-apart-ms", "-1"}, "--ranks-apart-ms"},
      {{"--ranks-apart-ms", "20"}, "--ranks-apart-ms"},  {{"--ranks-apart-ms", "1", "--rank-spread", "0.1"}, "give one of them"},
      {{"--trace", dir + "/no/such/dir/t.json"}, "--trace"}};
  for (const auto& [flags, named] : refused) {
    const bool own = flags[0] == "--profile" || flags[0] == "--model";
    const std::vector<std::string> profile = own ? std::vector<std::string>{} : std::vector<std::string>{"--profile", good};
    const ProcResult r = run_one({plus(plus(base, profile), flags)}, 30);
    EXPECT_EQ(r.exit_code, 2) << flags[0] << "\n" << r.output;
    EXPECT_NE(r.output.find(named), std::string::npos) << r.output;
  }
}

// Note [The slowest rank]: two ranks that end backward a mean |a - b| of d apart make the step
// wait d / 2 longer for the later one (max(a, b) = (a + b) / 2 + |a - b| / 2), whatever their
// spread's shape; --ranks-apart-ms turns d into the spread that gives it (sqrt(pi)/2 x d).
TEST(DdpSim, TwoRanksApartByDMsComputeHalfOfItLonger) {
  const std::string dir = temp_dir();
  std::ofstream(dir + "/tiny.json") << tiny_json().dump();
  const std::vector<std::string> base{"ddp_sim", "--compute-ms", "14", "--profile", dir + "/tiny.json", "--gpus-per-node", "2"};
  const ProcResult apart = run_one({plus(base, {"--ranks-apart-ms", "2"})}, 30), alike = run_one({base}, 30);
  ASSERT_EQ(apart.exit_code, 0) << apart.output;
  ASSERT_EQ(alike.exit_code, 0) << alike.output;
  EXPECT_NE(apart.output.find("ranks apart by 2 ms (--ranks-apart-ms): a spread of 1.772 ms, 12.66 % of the compute"), std::string::npos)
      << apart.output;
  EXPECT_NE(apart.output.find("the slowest of 2 ranks (a spread of 0.126604): the compute 1.000 ms longer"), std::string::npos)
      << apart.output;
  const auto step = [](const std::string& out) {
    std::smatch m;
    return std::regex_search(out, m, std::regex("\nstep: ([0-9.]+) ms")) ? std::stod(m[1]) : -1;
  };
  EXPECT_GT(step(apart.output), step(alike.output)) << apart.output << alike.output;
}

// Note [Measured all-reduce tables]: a table is read on the line through two rows, between them
// and beyond them; its latency term is where the first two rows' line meets 0 bytes.
TEST(DdpSim, AMeasuredTableIsReadBetweenAndBeyondItsRows) {
  const sim::MeasuredAllReduce t{2, {{1e6, 100e-6}, {2e6, 150e-6}, {4e6, 130e-6}, {8e6, 230e-6}}};
  EXPECT_NEAR(sim::interpolate(t, 1e6).total(), 100e-6, 1e-12);       // on a row
  EXPECT_NEAR(sim::interpolate(t, 1.5e6).total(), 125e-6, 1e-12);     // between two
  EXPECT_NEAR(sim::interpolate(t, 3e6).total(), 140e-6, 1e-12);       // a protocol's step down is kept
  EXPECT_NEAR(sim::interpolate(t, 16e6).total(), 430e-6, 1e-12);      // beyond the last: its line, 25 us per MB
  EXPECT_NEAR(sim::interpolate(t, 0.5e6).total(), 75e-6, 1e-12);      // below the first: the first line
  EXPECT_NEAR(sim::interpolate(t, 1.5e6).latency_s, 50e-6, 1e-12);    // 100 us - 1 MB x 50 us/MB
  EXPECT_NEAR(sim::interpolate(t, 0).total(), 50e-6, 1e-12);
  EXPECT_THROW(sim::interpolate({2, {{1e6, 1e-4}}}, 1e6), std::invalid_argument);
  EXPECT_THROW(sim::interpolate({2, {{2e6, 1e-4}, {1e6, 2e-4}}}, 1e6), std::invalid_argument);
}

// The DGX-1 preset: a world of one node of 2, 4 or 8 GPUs all-reduces as vTrain measured it (100
// MiB in 4.6732, 1.851 and 1.3954 ms); 3 GPUs and several nodes keep the ring formula; a flag
// for the node's links drops the tables, in the tool as the Note says.
TEST(DdpSim, ThePresetsMeasuredAllReduceServesTheWorldsOfItsGpuCounts) {
  const sim::Network net = sim::network_of(sim::find_preset("dgx-v100"));
  const double mib100 = 100.0 * sim::kMiB;
  EXPECT_NEAR(sim::allreduce({1, 2}, net, mib100).total(), 4.6732e-3, 1e-9);
  EXPECT_NEAR(sim::allreduce({1, 4}, net, mib100).total(), 1.8510e-3, 1e-9);
  EXPECT_NEAR(sim::allreduce({1, 8}, net, mib100).total(), 1.3954e-3, 1e-9);
  EXPECT_NEAR(sim::allreduce({1, 8}, net, 13.5 * sim::kMiB).total(), (313.2e-6 + 255.9e-6) / 2, 1e-12);
  EXPECT_DOUBLE_EQ(sim::allreduce({1, 3}, net, mib100).total(), sim::ring_allreduce(3, mib100, net.intra).total());
  EXPECT_DOUBLE_EQ(sim::allreduce({2, 8}, net, mib100).total(),
                   sim::ring_allreduce(16, mib100, {net.inter.bytes_per_s, net.inter.latency_s}).total());
  const std::string profiles = std::string(DDP_SOURCE_DIR) + "/bench/profiles";
  const std::vector<std::string> base{"ddp_sim", "--profiles-dir", profiles, "--model", "resnet50", "--preset", "dgx-v100",
                                      "--compute-ms", "97", "--gpus-per-node", "2"};
  const ProcResult table = run_one({base}, 30), flag = run_one({plus(base, {"--intra-gbps", "1200"})}, 30);
  ASSERT_EQ(table.exit_code, 0) << table.output;
  ASSERT_EQ(flag.exit_code, 0) << flag.output;
  EXPECT_NE(table.output.find("all-reduce as measured on 2 GPUs of one node (the preset's table)"), std::string::npos) << table.output;
  EXPECT_NE(flag.output.find("within a node 1200 Gb/s, 5 us"), std::string::npos) << flag.output;
}

// Note [Presets: where each figure comes from] gives each preset's figures on a line of its own;
// the presets the tool fills its flags from are those lines, and a name that is none of them is
// refused naming the valid ones (the tool's exit 2 is checked above).
TEST(DdpSim, PresetsAreTheFiguresOfTheirNote) {
  std::ifstream in(std::string(DDP_SOURCE_DIR) + "/bench/ddp_sim_presets.cpp");
  std::stringstream source;
  source << in.rdbuf();
  ASSERT_NE(source.str().find("// Note [Presets: where each figure comes from]"), std::string::npos);
  ASSERT_EQ(sim::presets().size(), 3u);
  for (const auto& p : sim::presets()) {
    EXPECT_NE(source.str().find("//   " + sim::preset_line(p) + "\n"), std::string::npos) << p.name << ": the Note has no line\n"
                                                                                       << sim::preset_line(p);
    const sim::Network n = sim::network_of(p);
    EXPECT_DOUBLE_EQ(n.intra.bytes_per_s, p.intra_gbps * 1e9 / 8);
    EXPECT_DOUBLE_EQ(n.inter.latency_s, p.inter_latency_us * 1e-6);
  }
  // The DGX-1's figures, as the Note derives them: 6 NVLinks x 25 GB/s, 40 GB/s across machines.
  EXPECT_EQ(sim::preset_line(sim::find_preset("dgx-v100")),
            "dgx-v100: intra 1200 Gb/s 5 us, inter 320 Gb/s 10 us, ring; measured in a node of 2, 4, 8 GPUs; interference 0.189");
  EXPECT_DOUBLE_EQ(sim::network_of(sim::find_preset("dgx-v100")).intra.bytes_per_s, 6 * 25e9);
  EXPECT_DOUBLE_EQ(sim::network_of(sim::find_preset("dgx-v100")).inter.bytes_per_s, 40e9);
  try {
    sim::find_preset("dgx-2");
    FAIL() << "no UsageError";
  } catch (const ddp::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("dgx-2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(sim::preset_names()), std::string::npos) << e.what();
  }
  EXPECT_THROW(sim::model_profile_path(std::string(DDP_SOURCE_DIR) + "/bench/profiles", "../README"), ddp::UsageError);
  EXPECT_EQ(sim::model_profile_path(std::string(DDP_SOURCE_DIR) + "/bench/profiles", "resnet50"),
            std::string(DDP_SOURCE_DIR) + "/bench/profiles/resnet50.json");
}

// bench/ddp_table.md holds `ddp_sim --table pytorch-dgx1` and `--table pytorch-dgx1-held-out` as
// printed; recomputed here from the checked-in profiles and published figures (Note [The PyTorch
// DGX-1 table], Note [The PyTorch DGX-1 table, held out]), each must be the same figure for figure,
// and the first line that differs is named.
TEST(DdpSim, TheDgx1TableOnThisPageIsWhatTheCommandPrints) {
  const std::string page = std::string(DDP_SOURCE_DIR) + "/bench/ddp_table.md";
  const std::string profiles = std::string(DDP_SOURCE_DIR) + "/bench/profiles";
  for (const auto& [name, table] : std::vector<std::pair<std::string, std::string (*)(const std::string&)>>{
           {"pytorch-dgx1", &sim::pytorch_dgx1_table}, {"pytorch-dgx1-held-out", &sim::pytorch_dgx1_held_out_table}}) {
    SCOPED_TRACE(name);
    std::ifstream in(page);
    ASSERT_TRUE(in) << page;
    std::vector<std::string> on_page;
    bool inside = false, ended = false;
    int begin_line = 0, n = 0;
    for (std::string l; std::getline(in, l);) {
      ++n;
      if (l == "<!-- ddp_sim --table " + name + ": begin -->") {
        inside = true, begin_line = n;
      } else if (l == "<!-- ddp_sim --table " + name + ": end -->") {
        ended = inside, inside = false;
      } else if (inside) {
        on_page.push_back(l);
      }
    }
    ASSERT_TRUE(begin_line > 0 && ended) << page << ": no begin and end markers around the table " << name;
    std::vector<std::string> printed;
    std::istringstream text(table(profiles));
    for (std::string l; std::getline(text, l);) printed.push_back(l);
    for (size_t i = 0; i < std::max(printed.size(), on_page.size()); ++i) {
      const std::string a = i < on_page.size() ? on_page[i] : "(the page's table has ended)";
      const std::string b = i < printed.size() ? printed[i] : "(the printed table has ended)";
      if (a != b) {
        ADD_FAILURE() << "bench/ddp_table.md:" << begin_line + 1 + i << " differs from ddp_sim --table " << name << ":\n  page:    " << a
                      << "\n  printed: " << b;
        break;
      }
    }
    // The same twice: no clock, no randomness.
    EXPECT_EQ(table(profiles), table(profiles));
  }
}

// How the published bucket_cap_mb=1 figures read (Note [The published bucket_cap_mb=1 figures]):
// diff.py prints -100 (b - a) / a, so a negative figure is a longer step with 1 MiB buckets. The
// table shows the figure negated back beside the seconds diff.py printed for the 1 MiB run and the
// default's from the README's first table; in every row the sign and the seconds must agree (the
// 1 MiB run is the slower one), and a figure that has a sign (beyond 0.5 %) must be judged. Read
// the other way round (the figure as diff.py prints it), the table stops.
TEST(DdpSim, ThePublishedBucketChangeIsALongerStepByItsOwnSeconds) {
  std::istringstream text(sim::pytorch_dgx1_table(std::string(DDP_SOURCE_DIR) + "/bench/profiles"));
  const std::regex row(R"(^\| (resnet[0-9]+) \| ([^|]+) \| ([-+0-9.]+) \| ([-+0-9.]+) \| ([0-9.]+) against ([0-9.]+) \| ([^|]*) \|$)");
  int rows = 0, judged = 0;
  for (std::string l; std::getline(text, l);) {
    std::smatch m;
    if (!std::regex_match(l, m, row)) continue;
    ++rows;
    const double published = std::stod(m[4]), one_mib = std::stod(m[5]), default_cap = std::stod(m[6]);
    EXPECT_GT(one_mib, default_cap) << l;      // diff.py's own seconds: 1 MiB was slower
    EXPECT_GT(published, 0) << l;              // and the figure, negated back, says so
    if (std::fabs(published) > 0.5 && m[2].str() != "1") {
      ++judged;
      EXPECT_TRUE(m[7] == "sign right" || m[7] == "SIGN WRONG") << l;
    }
  }
  EXPECT_EQ(rows, 10);   // 2 models x 1, 2, 4, 8, 16 GPUs
  EXPECT_EQ(judged, 7);  // all but ResNet-101 at 16 GPUs (+0.1 %) from 2 GPUs on
}

// ---- the FSDP step (Note [An FSDP step]) ----

namespace {

// n equal layers, each one unit of `bytes` (one parameter), forward 2 FLOPs and backward 6: a
// compute of 8n ms is forward 2 ms and backward 6 ms a unit.
sim::Profile equal_units(int n, double bytes) {
  nlohmann::json j = {{"model", "equal"}};
  for (int l = 0; l < n; ++l) {
    const std::string name = "unit" + std::to_string(l);
    j["layers"].push_back({{"name", name}, {"type", "Linear"}, {"forward_flops", 2}, {"backward_flops", 6}});
    j["parameters"].push_back({{"name", name + ".weight"}, {"numel", bytes / 4}, {"bytes", bytes}, {"layer", name}});
  }
  return sim::parse_profile(j, "equal.json");
}

}  // namespace

// An all-gather and a reduce-scatter are the two halves of the ring all-reduce: (W-1) steps each
// of alpha + (n/W)/B, together the all-reduce's 2(W-1), to the last bit (halving is exact) in
// every case allreduce() has: one node, a flat ring across nodes, hierarchical, a measured table.
TEST(DdpSim, AnAllGatherAndAReduceScatterAddUpToTheAllReduce) {
  const auto half = sim::ring_half(8, 100e6, {10e9, 5e-6});
  EXPECT_NEAR(half.latency_s, 7 * 5e-6, 1e-18);
  EXPECT_NEAR(half.bandwidth_s, 7.0 / 8 * 100e6 / 10e9, 1e-15);  // 8.75 ms
  sim::Network n = network(10e9, 2e9, 5e-6, 20e-6);
  sim::Network h = n;
  h.algorithm = sim::Algorithm::hierarchical;
  const sim::Network dgx = sim::network_of(sim::find_preset("dgx-v100"));
  const std::vector<std::pair<sim::World, const sim::Network*>> cases{
      {{1, 8}, &n}, {{2, 8}, &n}, {{2, 8}, &h}, {{4, 1}, &h}, {{128, 8}, &h}, {{1, 3}, &n}, {{1, 1}, &n}, {{1, 8}, &dgx}, {{1, 2}, &dgx}};
  for (const auto& [w, net] : cases) {
    for (double bytes : {4.0, 1e6, 13.5 * sim::kMiB, 100e6}) {
      const auto ag = sim::half_allreduce(w, *net, bytes), rs = sim::half_allreduce(w, *net, bytes);
      const auto ar = sim::allreduce(w, *net, bytes);
      EXPECT_EQ(ag.latency_s + rs.latency_s, ar.latency_s) << w.nodes << "x" << w.gpus_per_node << " " << bytes;
      EXPECT_EQ(ag.bandwidth_s + rs.bandwidth_s, ar.bandwidth_s) << w.nodes << "x" << w.gpus_per_node << " " << bytes;
    }
  }
  // Two nodes of 8 on the flat ring: 15 steps at the slowest hop (20 us, 2 GB/s).
  EXPECT_NEAR(sim::half_allreduce({2, 8}, n, 100e6).total(), 15 * 20e-6 + 15.0 / 16 * 100e6 / 2e9, 1e-12);
}

// No prefetch, 2 units on 2 ranks at 1 GB/s: each collective of a unit's 2 MB takes c = 1 ms
// (one step of 1 MB). Forward 2 ms and backward 6 ms a unit (compute 16 ms), by hand:
//   forward:  AG0 0-1, unit0 1-3; AG1 issued at 3, 3-4, unit1 4-6       waits 1 + 1
//   backward: AG1 6-7, unit1 7-13, RS1 13-14; AG0 issued at 13, behind RS1: 14-15, unit0 15-21,
//             RS0 21-22                                                   waits 1 + 2, tail 1
// Every collective is exposed: the step is compute + 3 per unit, 16 + 6 = 22 ms; with 4 units
// the same closed form, 32 + 12 = 44 ms. Nothing runs beside a collective, so the interference
// changes nothing.
TEST(DdpSim, FsdpWithoutPrefetchExposesEveryCollective) {
  const sim::Network n = network(1e9, 1e9, 0, 0);
  const auto r = sim::simulate_fsdp(equal_units(2, 2e6), {1, 2}, n, compute(16e-3), 0);
  ASSERT_EQ(r.units.size(), 2u);
  const auto& u0 = r.units[0];
  const auto& u1 = r.units[1];
  EXPECT_NEAR(u0.forward.end_s, 1e-3, 1e-15);
  EXPECT_NEAR(u0.forward.wait_s(), 1e-3, 1e-15);
  EXPECT_NEAR(u1.forward.issue_s, 3e-3, 1e-15);
  EXPECT_NEAR(u1.forward.wait_s(), 1e-3, 1e-15);
  EXPECT_NEAR(r.forward_end_s, 6e-3, 1e-15);
  EXPECT_NEAR(u1.backward.end_s, 7e-3, 1e-15);
  EXPECT_NEAR(u1.reduce_scatter_end_s, 14e-3, 1e-15);
  EXPECT_NEAR(u0.backward.issue_s, 13e-3, 1e-15);
  EXPECT_NEAR(u0.backward.start_s, 14e-3, 1e-15);  // behind unit 1's reduce-scatter: one channel
  EXPECT_NEAR(u0.backward.wait_s(), 2e-3, 1e-15);
  EXPECT_NEAR(r.backward_end_s, 21e-3, 1e-15);
  EXPECT_NEAR(r.tail_s, 1e-3, 1e-15);
  EXPECT_NEAR(r.step_s, 22e-3, 1e-15);
  EXPECT_NEAR(r.allgather_s, 4e-3, 1e-15);
  EXPECT_NEAR(r.reduce_scatter_s, 2e-3, 1e-15);
  EXPECT_NEAR(r.exposed_comm_s, r.allgather_s + r.reduce_scatter_s, 1e-15);
  for (const auto& u : r.units) EXPECT_FALSE(u.forward.in_time() || u.backward.in_time());
  EXPECT_NEAR(sim::simulate_fsdp(equal_units(4, 2e6), {1, 2}, n, compute(32e-3), 0).step_s, 32e-3 + 12 * 1e-3, 1e-15);
  sim::Options slowed = compute(16e-3);
  slowed.interference = 1;
  const auto s = sim::simulate_fsdp(equal_units(2, 2e6), {1, 2}, n, slowed, 0);
  EXPECT_EQ(s.interference_s, 0);
  EXPECT_EQ(s.step_s, r.step_s);
}

// Prefetch 1, the same 1 ms collectives, 4 units, compute longer than what the channel carries
// beside it (forward 2 ms a unit beside one all-gather, backward 6 ms beside a reduce-scatter and
// an all-gather): only each pass's first all-gather is exposed (nothing before it to hide
// behind), and the last reduce-scatter, after backward: the step is 32 + 1 + 1 + 1 = 35 ms.
// Beside a collective at half speed (interference 1): a forward unit with a 1 ms all-gather beside
// it does 0.5 ms of its 2 in that time, and takes 2.5 ms (units 0-2; unit 3 prefetches nothing);
// backward's middle units have 2 ms of collectives beside them and take 7 ms, its first and last
// 1 ms (an all-gather; a reduce-scatter) and take 6.5: 1.5 + 3 ms more, a step of 39.5 ms.
TEST(DdpSim, FsdpWithPrefetchExposesOnlyEachPassesFirstAllGather) {
  const sim::Network n = network(1e9, 1e9, 0, 0);
  const auto r = sim::simulate_fsdp(equal_units(4, 2e6), {1, 2}, n, compute(32e-3), 1);
  ASSERT_EQ(r.units.size(), 4u);
  EXPECT_NEAR(r.forward_wait_s, 1e-3, 1e-15);
  EXPECT_NEAR(r.backward_wait_s, 1e-3, 1e-15);
  EXPECT_NEAR(r.tail_s, 1e-3, 1e-15);
  EXPECT_NEAR(r.step_s, 35e-3, 1e-15);
  for (size_t u = 0; u < 4; ++u) {
    EXPECT_EQ(r.units[u].forward.in_time(), u != 0) << u;
    EXPECT_EQ(r.units[u].backward.in_time(), u != 3) << u;
  }
  EXPECT_NEAR(r.units[1].forward.issue_s, r.units[0].forward.compute_start_s, 1e-15);  // issued as unit 0 starts
  EXPECT_NEAR(r.units[2].backward.issue_s, r.units[3].backward.compute_start_s, 1e-15);
  // A deeper prefetch hides nothing more here: every all-gather but the first was in time.
  EXPECT_NEAR(sim::simulate_fsdp(equal_units(4, 2e6), {1, 2}, n, compute(32e-3), 3).step_s, 35e-3, 1e-15);
  sim::Options slowed = compute(32e-3);
  slowed.interference = 1;
  const auto s = sim::simulate_fsdp(equal_units(4, 2e6), {1, 2}, n, slowed, 1);
  EXPECT_NEAR(s.interference_s, 4.5e-3, 1e-15);
  EXPECT_NEAR(s.step_s, 39.5e-3, 1e-15);
  EXPECT_NEAR(s.exposed_comm_s, 3e-3, 1e-15);
  EXPECT_THROW(sim::simulate_fsdp(equal_units(4, 2e6), {1, 2}, n, compute(32e-3), -1), std::invalid_argument);
  slowed.allreduce_slowdown = 0.5;
  EXPECT_THROW(sim::simulate_fsdp(equal_units(4, 2e6), {1, 2}, n, slowed, 1), std::invalid_argument);
}

// One rank has nothing to gather or scatter: the step is its compute. Layers without parameters
// (tiny's relu) are no unit. On a free network (no latency, infinite bandwidth) of 8 ranks the
// step is the compute with the optimizer on 1/8 of the parameters.
TEST(DdpSim, FsdpOnOneRankOrAFreeNetworkIsItsCompute) {
  sim::Options o = compute(0.1);
  o.optimizer_s = 0.016;
  const sim::Profile p = tiny();
  const auto one = sim::simulate_fsdp(p, {1, 1}, network(1e9, 1e9, 1e-5, 1e-5), o, 1);
  ASSERT_EQ(one.units.size(), 3u);  // conv1, fc1, fc2
  EXPECT_EQ(p.layers[one.units[1].layer].name, "fc1");
  EXPECT_EQ(one.units[1].bytes, 2097152u + 4096u);
  EXPECT_EQ(one.allgather_s, 0);
  EXPECT_EQ(one.reduce_scatter_s, 0);
  EXPECT_EQ(one.exposed_comm_s, 0);
  EXPECT_NEAR(one.step_s, 0.1, 1e-15);
  for (const auto& u : one.units) EXPECT_TRUE(u.forward.in_time() && u.backward.in_time());
  const auto free = sim::simulate_fsdp(p, {2, 4}, network(INFINITY, INFINITY, 0, 0), o, 0);
  EXPECT_EQ(free.exposed_comm_s, 0);
  EXPECT_NEAR(free.optimizer_s, 0.002, 1e-18);
  EXPECT_NEAR(free.step_s, 0.1 - 0.016 + 0.002, 1e-15);
}

TEST(DdpSim, TheToolPlaysOutAnFsdpStepAndRefusesABadPrefetch) {
  const std::string dir = temp_dir();
  const std::string good = dir + "/tiny.json";
  std::ofstream(good) << tiny_json().dump();
  const std::vector<std::string> base{"ddp_sim", "--compute-ms", "14", "--profile", good, "--nodes", "2", "--gpus-per-node", "8"};
  const ProcResult ok = run_one({plus(base, {"--preset", "a100-8", "--fsdp", "--prefetch", "2", "--trace", dir + "/fsdp.json"})}, 30);
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  for (const std::string& line : std::vector<std::string>{"fsdp: 3 units (the layers with parameters", "prefetch 2", "step: ",
                                                          "forward: ", "backward: ", "all-gather: ", "reduce-scatter: ",
                                                          "exposed ", "DDP, the same step: ", "FSDP / DDP: ", "trace: " + dir + "/fsdp.json"}) {
    EXPECT_NE(ok.output.find(line), std::string::npos) << line << "\n" << ok.output;
  }
  EXPECT_GT(ddp::read_trace_events(dir + "/fsdp.json").size(), 10u);
  const std::vector<std::pair<std::vector<std::string>, std::string>> refused{
      {{"--fsdp", "--prefetch", "-1"}, "--prefetch"},
      {{"--fsdp", "--prefetch", "one"}, "--prefetch"},
      {{"--prefetch", "1"}, "--prefetch: only with --fsdp"},
      {{"--fsdp", "--allreduce-slowdown", "0.5"}, "--allreduce-slowdown"}};
  for (const auto& [flags, named] : refused) {
    const ProcResult r = run_one({plus(base, flags)}, 30);
    EXPECT_EQ(r.exit_code, 2) << flags[1] << "\n" << r.output;
    EXPECT_NE(r.output.find(named), std::string::npos) << r.output;
  }
}

// bench/README.md's FSDP example (its section "One FSDP step"): the first block is the command and
// its output trimmed, the second the same command at --prefetch 2, trimmed to its summary. Every
// line they show is a line the tool prints (all but the marker of the trimmed units).
TEST(DdpSim, TheFsdpExampleOnTheBenchPageIsWhatTheToolPrints) {
  std::ifstream in(std::string(DDP_SOURCE_DIR) + "/bench/README.md");
  std::vector<std::vector<std::string>> blocks;
  bool section = false, inside = false;
  for (std::string l; std::getline(in, l);) {
    if (l.rfind("#", 0) == 0) section = l == "### One FSDP step (`ddp_sim --fsdp`)";
    if (!section || l.rfind("```", 0) != 0) {
      if (section && inside) blocks.back().push_back(l);
      continue;
    }
    inside = !inside;
    if (inside) blocks.emplace_back();
  }
  ASSERT_EQ(blocks.size(), 2u) << "bench/README.md: the FSDP section's two blocks";
  const std::string command = "$ ./build-cpu/ddp_sim --model resnet50 --preset dgx-v100 --compute-ms 97 --nodes 2 --gpus-per-node 8 --fsdp";
  ASSERT_EQ(blocks[0].front(), command + " --prefetch 1");
  const std::vector<std::string> base{"ddp_sim", "--profiles-dir", std::string(DDP_SOURCE_DIR) + "/bench/profiles", "--model", "resnet50",
                                      "--preset", "dgx-v100", "--compute-ms", "97", "--nodes", "2", "--gpus-per-node", "8", "--fsdp"};
  for (int k = 0; k < 2; ++k) {
    const ProcResult r = run_one({plus(base, {"--prefetch", k == 0 ? "1" : "2"})}, 30);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::set<std::string> printed;
    std::istringstream lines(r.output);
    for (std::string l; std::getline(lines, l);) printed.insert(l);
    for (size_t i = k == 0 ? 1 : 0; i < blocks[k].size(); ++i) {
      if (blocks[k][i] == "   ... (units 6 to 103)") continue;
      EXPECT_TRUE(printed.count(blocks[k][i])) << "bench/README.md, FSDP block " << k + 1 << ", not printed:\n" << blocks[k][i] << "\n" << r.output;
    }
  }
}

// Note [What faults cost at scale] (bench/fault_cost.h): the closed forms, and the formulas
// against a simulation of random failures that makes none of their approximations.
TEST(FaultCost, YoungsIntervalAndTheLossesAreTheFormulas) {
  sim::FaultInputs in;
  in.nodes = 100, in.node_mtbf_s = 1000 * 3600.0, in.checkpoint_s = 60, in.restart_s = 300;
  in.step_s = 1, in.recovery_s = 0.5, in.quorum_s = 0.01, in.replacement_s = 600, in.replica_groups = 10;
  const sim::FaultCost c = sim::fault_cost(in);
  EXPECT_DOUBLE_EQ(c.job_mtbf_s, 36000);                   // 1000 h / 100 nodes
  EXPECT_DOUBLE_EQ(c.young_interval_s, std::sqrt(2 * 60 * 36000.0));
  EXPECT_DOUBLE_EQ(c.daly_interval_s, c.young_interval_s - 60);
  const double tau = c.young_interval_s;
  EXPECT_DOUBLE_EQ(c.restart_loss, 60 / tau + (tau / 2 + 30 + 300) / 36000);
  EXPECT_DOUBLE_EQ(c.quorum_loss, 0.01 + (1 + 0.01 + 0.5 + 60) / 36000);
  // Young's interval is the least loss: a little shorter or longer loses more.
  for (double f : {0.8, 1.25}) {
    const double t = tau * f, w = 60 / t + (t / 2 + 30 + 300) / 36000;
    EXPECT_GT(w, c.restart_loss) << f;
  }
  EXPECT_THROW(sim::fault_cost([] { sim::FaultInputs bad; bad.step_s = 1; return bad; }()), ddp::UsageError);  // no MTBF
}

TEST(FaultCost, TheFormulasAgreeWithASimulationOfRandomFailures) {
  sim::FaultInputs in;
  in.nodes = 64, in.node_mtbf_s = 500 * 3600.0, in.checkpoint_s = 30, in.restart_s = 120;
  in.step_s = 2, in.recovery_s = 1, in.quorum_s = 0.02, in.replacement_s = 300, in.replica_groups = 8;
  const sim::FaultCost c = sim::fault_cost(in);
  const double work = 4000 * 3600.0;  // about 500 failures, fixed seeds: measured 3 % (restart) and 1 % (quorum) from the formulas
  double restart = 0, quorum = 0;
  for (uint64_t seed : {1, 2, 3}) {
    restart += sim::simulate_restart_loss(in, c.young_interval_s, work, seed) / 3;
    quorum += sim::simulate_quorum_loss(in, work, seed) / 3;
  }
  EXPECT_NEAR(restart, c.restart_loss, 0.05 * c.restart_loss) << restart << " simulated, " << c.restart_loss << " the formula";
  EXPECT_NEAR(quorum, c.quorum_loss, 0.03 * c.quorum_loss) << quorum << " simulated, " << c.quorum_loss << " the formula";
  EXPECT_LT(c.quorum_loss, c.restart_loss);
}

TEST(FaultCost, TheToolPrintsItAndRefusesWhatItLacks) {
  ProcResult ok = run_one({{"ddp_sim", "--faults", "--nodes", "100", "--node-mtbf-hours", "1000", "--checkpoint-s", "60", "--restart-s",
                            "300", "--step-s", "1", "--recovery-s", "0.5", "--replacement-s", "600", "--replica-groups", "10"}},
                          30);
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_NE(ok.output.find("the job fails every 10.00 h (M)"), std::string::npos) << ok.output;
  EXPECT_NE(ok.output.find("Young's interval 2078 s"), std::string::npos) << ok.output;  // sqrt(2 x 60 x 36000)
  ProcResult missing = run_one({{"ddp_sim", "--faults", "--nodes", "100", "--step-s", "1"}}, 30);
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_NE(missing.output.find("--faults needs --node-mtbf-hours"), std::string::npos) << missing.output;
}
