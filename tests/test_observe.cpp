// Seeing inside a run (issue 6), as real processes: the --trace timelines of 03, 04 and 05 and
// their merge, the faults injected into 02 and 05 and the rank the survivors' flight recorders
// name, and the cost model (its fit in closed form, and bench/cost_model.sh end to end).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "bench/alpha_beta.h"
#include "common/observe/trace.h"
#include "proc.h"

using namespace ddp_test;

namespace {

// One event of a --trace file (the fields the tests look at).
struct Event {
  std::string name, ph;
  int pid = -1;
  double ts = 0, dur = 0;
};

std::vector<Event> events(const std::string& path) {
  std::vector<Event> out;
  for (const nlohmann::json& e : ddp::read_trace_events(path)) {
    if (e.value("name", "").empty()) continue;
    out.push_back({e["name"], e["ph"], static_cast<int>(ddp::event_number(e, "pid")), ddp::event_number(e, "ts"),
                   ddp::event_number(e, "dur")});
  }
  return out;
}

int count_events(const std::vector<Event>& ev, const std::string& name, int pid) {
  int n = 0;
  for (const auto& e : ev) n += e.name == name && e.pid == pid;
  return n;
}

// How many of rank 0's all-reduces started before the backward they belong to had ended.
int allreduces_inside_backward(const std::vector<Event>& ev) {
  std::vector<std::pair<double, double>> backwards;
  for (const auto& e : ev) {
    if (e.pid == 0 && e.name == "backward") backwards.emplace_back(e.ts, e.ts + e.dur);
  }
  int inside = 0;
  for (const auto& e : ev) {
    if (e.pid != 0 || e.name != "all-reduce") continue;
    for (const auto& [from, to] : backwards) inside += e.ts >= from && e.ts < to;
  }
  return inside;
}

std::string tail(const std::string& s) { return s.size() > 6000 ? s.substr(s.size() - 6000) : s; }

}  // namespace

TEST(Trace, TrainerWritesEveryPhaseAndBucketOfEveryRankAndMergesThem) {
  const std::string dir = temp_dir();
  const ProcResult r = run_one({{"05_ddp", "--nproc-per-node", "2", "--max-steps", "6", "--train-samples", "1024",
                                 "--test-samples", "100", "--log-every", "3", "--timeout", "30", "--out", dir + "/run",
                                 "--trace", dir + "/trace.json"}},
                               120);
  ASSERT_EQ(r.exit_code, 0) << tail(r.output);
  const std::string merged = read_text(dir + "/trace.json");
  ASSERT_EQ(merged.rfind("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[", 0), 0u) << merged.substr(0, 200);
  EXPECT_EQ(merged.substr(merged.size() - 3), "]}\n");
  const auto ev = events(dir + "/trace.json");
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    for (const char* phase : {"data", "forward", "backward", "optimizer", "wait for all-reduces"}) {
      EXPECT_EQ(count_events(ev, phase, rank), 6) << phase;
    }
    EXPECT_EQ(count_events(ev, "all-reduce stop-flag", rank), 5);  // after every step but the last
    EXPECT_EQ(count_events(ev, "step done", rank), 6);              // its number, for trace_merge --text --step
    // Every step readies and all-reduces bucket 0 (the MLP's rebuilt layout may hold 1 or 2 buckets).
    EXPECT_EQ(count_events(ev, "bucket0 ready", rank), 6);
    EXPECT_EQ(count_events(ev, "all-reduce bucket0", rank), 6);
    EXPECT_EQ(count_events(ev, "all-reduce bucket1", rank), count_events(ev, "bucket1 ready", rank));
    // The per-rank files are what was merged.
    EXPECT_EQ(static_cast<int>(events(dir + "/trace.rank" + std::to_string(rank) + ".json").size()),
              static_cast<int>(std::count_if(ev.begin(), ev.end(), [&](const Event& e) { return e.pid == rank; })));
  }
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex(R"(overlap: ([0-9.]+)% of all-reduce time hidden behind backward)")))
      << tail(r.output);
  EXPECT_GE(std::stod(m[1]), 0.0);
  EXPECT_LE(std::stod(m[1]), 100.0);
  EXPECT_EQ(count(r.output, "trace: "), 1) << tail(r.output);

  // trace_merge gives the same events from the per-rank files; anything else is refused (exit 2).
  const ProcResult merge = run_one({{"trace_merge", "-o", dir + "/again.json", dir + "/trace.rank0.json", dir + "/trace.rank1.json"}}, 30);
  ASSERT_EQ(merge.exit_code, 0) << merge.output;
  EXPECT_EQ(events(dir + "/again.json").size(), ev.size());
  std::ofstream(dir + "/bogus.json") << "[\n{\"name\":\"x\",\"ph\":\"X\",\"ts\":1}\nnot an event\n";
  const ProcResult bad = run_one({{"trace_merge", "-o", dir + "/bad.json", dir + "/bogus.json"}}, 30);
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("bogus.json:3: not an event line"), std::string::npos) << bad.output;

  // The same trace as text: one step, a line per rank and track (1000 characters wide, so that
  // the name of a span of 1 % of the step still fits). Step 3 counts from 1, as the progress
  // lines: from the first rank's 3rd forward to the last rank's 4th.
  const ProcResult text = run_one({{"trace_merge", "--text", dir + "/trace.json", "--step", "3", "--width", "1000"}}, 30);
  ASSERT_EQ(text.exit_code, 0) << text.output;
  double from = INFINITY, to = -INFINITY;
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<double> forwards;
    for (const Event& e : ev) {
      if (e.pid == rank && e.name == "forward") forwards.push_back(e.ts);
    }
    std::sort(forwards.begin(), forwards.end());
    ASSERT_EQ(forwards.size(), 6u);
    from = std::min(from, forwards[2]), to = std::max(to, forwards[3]);
  }
  char header[64];
  std::snprintf(header, sizeof(header), "step 3, %.2f ms from the first rank's forward", (to - from) / 1e3);
  EXPECT_NE(text.output.find(header), std::string::npos) << header << "\n" << text.output;
  for (const char* lane : {"rank 0 compute     :", "rank 0 collectives :", "rank 1 compute     :", "rank 1 collectives :"}) {
    EXPECT_NE(text.output.find(lane), std::string::npos) << lane << "\n" << text.output;
  }
  // Each rank's compute lane holds its forward and backward (each far more than 1 % of a step).
  std::istringstream lanes(text.output);
  int compute_lanes = 0;
  for (std::string lane; std::getline(lanes, lane);) {
    if (lane.find(" compute ") == std::string::npos) continue;
    ++compute_lanes;
    EXPECT_NE(lane.find("|forward="), std::string::npos) << lane;
    EXPECT_NE(lane.find("|backward="), std::string::npos) << lane;
  }
  EXPECT_EQ(compute_lanes, 2) << text.output;
  const ProcResult last = run_one({{"trace_merge", "--text", dir + "/trace.json", "--step", "5"}}, 30);
  EXPECT_EQ(last.exit_code, 0) << last.output;  // 6 steps: step 5 ends where step 6 starts
  const ProcResult no_step = run_one({{"trace_merge", "--text", dir + "/trace.json", "--step", "6"}}, 30);
  EXPECT_EQ(no_step.exit_code, 2) << no_step.output;  // ... but step 6 has no next one to end it
  EXPECT_NE(no_step.output.find("--step 6: rank 0 traced steps 1 to 6"), std::string::npos) << no_step.output;
  EXPECT_EQ(run_one({{"trace_merge", "--text", dir + "/trace.json", "--step", "0"}}, 30).exit_code, 2);  // steps count from 1
}

// trace_merge --text --step N draws the progress lines' step N also where the N-th forward is
// not step N: a run resumed after step 20 (its trace opens with step 21, as its "step done"
// instants say) with two micro-batches per step (--grad-accum 2: two forwards per optimizer step).
TEST(Trace, TextStepsAreTheProgressLinesStepsInAResumedRunWithMicroBatches) {
  const std::string dir = temp_dir();
  nlohmann::json events = nlohmann::json::array();
  auto span = [&](const char* name, double ts, double dur) {
    events.push_back({{"name", name}, {"ph", "X"}, {"ts", ts}, {"dur", dur}, {"pid", 0}, {"tid", 0}});
  };
  // Steps 21, 22 and 23 start at 1000, 2000 and 3500 us; step 24 starts at 4000 and never ends.
  const std::vector<std::pair<int, double>> steps = {{21, 1000}, {22, 2000}, {23, 3500}};
  for (const auto& [n, t] : steps) {
    span("forward", t, 100), span("backward", t + 100, 50);
    span("forward", t + 150, 100), span("backward", t + 250, 50);
    span("optimizer", t + 300, 50);
    events.push_back({{"name", "step done"}, {"ph", "i"}, {"ts", t + 360}, {"pid", 0}, {"tid", 0}, {"args", {{"step", n}}}});
  }
  span("forward", 4000, 100);
  std::ofstream(dir + "/t.json") << events.dump();
  for (const auto& [step, ms] : std::vector<std::pair<int, std::string>>{{22, "1.50"}, {23, "0.50"}}) {
    const ProcResult r = run_one({{"trace_merge", "--text", dir + "/t.json", "--step", std::to_string(step)}}, 30);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("step " + std::to_string(step) + ", " + ms + " ms from"), std::string::npos) << r.output;
  }
  const ProcResult before = run_one({{"trace_merge", "--text", dir + "/t.json", "--step", "1"}}, 30);
  EXPECT_EQ(before.exit_code, 2) << before.output;
  EXPECT_NE(before.output.find("rank 0 traced steps 21 to 24"), std::string::npos) << before.output;
}

TEST(Trace, ChapterThreeAllReducesAfterBackwardAndFourAsyncDuringIt) {
  // The toy model has 4 parameters and trains 20 steps: 80 all-reduces per rank in each chapter.
  // 03 starts them once backward has returned; 04 --comm async from its hooks, while it runs.
  const std::string dir = temp_dir();
  int inside[2] = {0, 0};
  const char* chapters[2][3] = {{"03_manual_allreduce", "--timeout", "30"}, {"04_grad_hooks", "--comm", "async"}};
  for (int c = 0; c < 2; ++c) {
    const std::string out = dir + "/" + chapters[c][0] + ".json";
    const ProcResult r = run_one({{"02_spawn", "--nproc-per-node", "2", "--timeout", "30", "--", bin(chapters[c][0]),
                                   chapters[c][1], chapters[c][2], "--trace", out}},
                                 120);
    ASSERT_EQ(r.exit_code, 0) << tail(r.output);
    const auto ev = events(out);
    EXPECT_EQ(count_events(ev, "all-reduce", 0), 80) << chapters[c][0];
    EXPECT_EQ(count_events(ev, "all-reduce", 1), 80) << chapters[c][0];
    EXPECT_EQ(count_events(ev, "backward", 0), 20) << chapters[c][0];
    inside[c] = allreduces_inside_backward(ev);
  }
  EXPECT_EQ(inside[0], 0) << "03 all-reduces only after backward";
  EXPECT_EQ(inside[1], 80) << "04 --comm async starts every all-reduce from a hook, inside backward";
}

// ---- faults: each injected for real; the survivors must name the rank ----

namespace {
ProcResult faulty_trainer(const std::vector<std::string>& fault, const std::string& timeout) {
  const std::string dir = temp_dir();
  return run_one({plus({"05_ddp", "--nproc-per-node", "2", "--on-failure", "wait", "--max-steps", "30", "--train-samples",
                        "2048", "--test-samples", "100", "--log-every", "10", "--timeout", timeout, "--out", dir},
                       fault)},
                 120);
}
}  // namespace

TEST(Faults, AKilledRankIsNamedGoneByTheSurvivorAndItsTraceKeepsItsSteps) {
  const std::string dir = temp_dir();
  const ProcResult r = faulty_trainer({"--kill-rank", "1", "--kill-at-step", "4", "--trace", dir + "/t.json"}, "20");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.output.find("[rank 1/2] fault injection: SIGKILL after step 4"), std::string::npos) << tail(r.output);
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(\[rank 0/2\] flight recorder: rank 1 \(host [^,]+, pid [0-9]+\) is gone)")))
      << tail(r.output);
  // Nobody merged (the run failed); the killed rank's file, without its closing "]", still
  // holds steps 1-4 and merges with the survivor's.
  const ProcResult merge = run_one({{"trace_merge", "-o", dir + "/t.json", dir + "/t.rank0.json", dir + "/t.rank1.json"}}, 30);
  ASSERT_EQ(merge.exit_code, 0) << merge.output;
  EXPECT_EQ(count_events(events(dir + "/t.json"), "optimizer", 1), 4);
}

TEST(Faults, AStragglerPastTheTimeoutIsNamedBehindAtTheCollectiveTheOthersWaitIn) {
  // Rank 1 sleeps 8 s before each step; rank 0 gives up on bucket 0's all-reduce after 2 s. Its
  // collectives: #1 the run folder's claim (Note [One run per folder]), #2 the parameters, #3 bucket 0.
  const ProcResult r = faulty_trainer({"--straggle-rank", "1", "--straggle-ms", "8000"}, "2");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_FALSE(r.timed_out);
  EXPECT_TRUE(std::regex_search(
      r.output, std::regex(R"(\[rank 0/2\] flight recorder: rank 1 is behind: it has not started #3 \(all-reduce bucket0 .*step 1\)\))")))
      << tail(r.output);
}

TEST(Faults, ARankThatSkipsAnAllReduceIsNamedByItselfOrBySurvivors) {
  const ProcResult r = faulty_trainer({"--skip-rank", "1", "--skip-at-step", "5"}, "5");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.output.find("[rank 1/2] fault injection (--skip-rank): not starting the all-reduce of bucket0"), std::string::npos);
  // Gloo may abort the rank that receives the larger message (Note [When the backend aborts])
  // or fail the collective: either way each report that names a culprit names rank 1.
  const bool by_rank0 = r.output.find("[rank 0/2] flight recorder: rank 1 skipped a collective") != std::string::npos;
  const bool by_rank1 = r.output.find("[rank 1/2] flight recorder: this rank (1) skipped a collective") != std::string::npos;
  EXPECT_TRUE(by_rank0 || by_rank1) << tail(r.output);
  EXPECT_EQ(count(r.output, "rank 0 skipped"), 0) << tail(r.output);
  EXPECT_EQ(count(r.output, "this rank (0) skipped"), 0) << tail(r.output);
}

TEST(Faults, SpawnsBuiltInWorkersNameTheStragglerAndTheKilledRank) {
  const ProcResult slow = run_one({{"02_spawn", "--world-size", "3", "--fail-rank", "2", "--fail-mode", "straggle",
                                    "--straggle-ms", "8000", "--timeout", "2"}},
                                  60);
  EXPECT_NE(slow.exit_code, 0);
  EXPECT_NE(slow.output.find("flight recorder: rank 2 is behind: it has not started #1 (all-reduce sum-of-ranks"), std::string::npos)
      << tail(slow.output);
  const ProcResult killed = run_one({{"02_spawn", "--world-size", "2", "--fail-rank", "1", "--fail-mode", "kill",
                                      "--on-failure", "wait", "--timeout", "20"}},
                                    60);
  EXPECT_NE(killed.exit_code, 0);
  EXPECT_TRUE(std::regex_search(killed.output, std::regex(R"(\[rank 0/2\] flight recorder: rank 1 \(host [^,]+, pid [0-9]+\) is gone)")))
      << tail(killed.output);
}

// ---- the cost model ----

TEST(CostModel, TheFitRecoversAlphaAndBetaOfExactRingTimes) {
  const ddp::cost::AlphaBeta truth{30e-6, 0.8e-9};
  std::vector<ddp::cost::Point> points;
  for (int n = 2; n <= 4; ++n) {
    for (double s = 4096; s <= 64 << 20; s *= 2) points.push_back({n, s, truth.time(n, s)});
  }
  const auto m = ddp::cost::fit(points);
  EXPECT_NEAR(m.alpha, truth.alpha, 1e-12);
  EXPECT_NEAR(m.beta, truth.beta, 1e-18);
  // busbw = algbw * 2(n-1)/n, as nccl-tests defines it.
  const ddp::cost::Point p{4, 1 << 20, 0.002};
  EXPECT_DOUBLE_EQ(ddp::cost::algbw(p), (1 << 20) / 0.002);
  EXPECT_DOUBLE_EQ(ddp::cost::busbw(p), (1 << 20) / 0.002 * 1.5);
  EXPECT_THROW(ddp::cost::fit({{2, 4096, 1e-4}, {3, 4096, 2e-4}}), std::invalid_argument);
}

TEST(CostModel, AStepOverlapsEveryBucketButTheLast) {
  // alpha 0, beta 0.5 ns/byte: at world 2 T = S beta, 0.524288 ms per MiB. 3 MiB of gradients
  // over a 3 ms backward, cap 1 MiB: buckets ready at 1, 2 and 3 ms, each all-reduced before
  // the next is ready; only the last one is left after backward.
  const ddp::cost::AlphaBeta m{0, 0.5e-9};
  ddp::cost::StepPlan plan;
  plan.param_bytes = 3 << 20, plan.bucket_cap = 1 << 20, plan.backward_s = 3e-3, plan.forward_s = 1e-3, plan.world = 2;
  const auto s = ddp::cost::predict_step(m, plan);
  EXPECT_EQ(s.buckets, 3);
  EXPECT_NEAR(s.comm_s, 3 * 0.524288e-3, 1e-12);
  EXPECT_NEAR(s.exposed_s, 0.524288e-3, 1e-12);
  EXPECT_NEAR(s.step_s, 1e-3 + 3e-3 + 0.524288e-3, 1e-12);
  EXPECT_NEAR(s.hidden_share(), 2.0 / 3, 1e-12);
  // Twice the bytes per second of link: each all-reduce outlasts the gap to the next bucket,
  // they queue, and 1.145728 ms are left: 2.048576 -> 3.097152 -> 4.145728 ms.
  const auto slow = ddp::cost::predict_step(ddp::cost::AlphaBeta{0, 1e-9}, plan);
  EXPECT_NEAR(slow.exposed_s, 1.145728e-3, 1e-12);
  // Whole tensors, as traced: 0.6 MiB at 1 ms and 0.6 MiB at 1.5 ms make the first bucket
  // (1.2 MiB >= 1 MiB, ready at 1.5 ms), 3 MiB at 3 ms the second: 0.629 ms + 1.573 ms of
  // all-reduce, the second all exposed (3 -> 4.572864 ms).
  const double mib = 1 << 20;
  plan.gradients = {{0.6 * mib, 1e-3}, {0.6 * mib, 1.5e-3}, {3 * mib, 3e-3}};
  const auto traced = ddp::cost::predict_step(m, plan);
  EXPECT_EQ(traced.buckets, 2);
  EXPECT_NEAR(traced.comm_s, 1.2 * mib * 0.5e-9 + 3 * mib * 0.5e-9, 1e-12);
  EXPECT_NEAR(traced.exposed_s, 3 * mib * 0.5e-9, 1e-12);
}

TEST(CostModel, OneBucketExposesAllOfItAndCompressionHalvesTheBytes) {
  // The plan of AStepOverlapsEveryBucketButTheLast (beta 0.5 ns/byte, 3 MiB over a 3 ms backward,
  // cap 1 MiB): one bucket (05 --one-bucket) starts at 3 ms and is all exposed, 1.572864 ms.
  const ddp::cost::AlphaBeta m{0, 0.5e-9};
  ddp::cost::StepPlan plan;
  plan.param_bytes = 3 << 20, plan.bucket_cap = 1 << 20, plan.backward_s = 3e-3, plan.forward_s = 1e-3, plan.world = 2;
  ddp::cost::StepPlan one = plan;
  one.first_bucket = one.bucket_cap = INFINITY;
  const auto s = ddp::cost::predict_step(m, one);
  EXPECT_EQ(s.buckets, 1);
  EXPECT_NEAR(s.comm_s, 1.572864e-3, 1e-12);
  EXPECT_NEAR(s.exposed_s, s.comm_s, 1e-12);
  EXPECT_NEAR(s.hidden_share(), 0, 1e-12);
  // An fp16 hook: the same buckets, half the bytes on the wire: 0.262144 ms each, the last exposed.
  ddp::cost::StepPlan half = plan;
  half.wire_fraction = 0.5;
  const auto h = ddp::cost::predict_step(m, half);
  EXPECT_EQ(h.buckets, 3);
  EXPECT_NEAR(h.comm_s, 3 * 0.262144e-3, 1e-12);
  EXPECT_NEAR(h.exposed_s, 0.262144e-3, 1e-12);
}

TEST(CostModel, OnAKnownLinkTheFitIsComparedWithTheRateAndVariantsWithTheirMeasuredSteps) {
  // Exact ring times on a 8 Mbit/s link: beta = 1 us/byte, alpha 30 us. 3 MiB over a 3 ms
  // backward, cap 1 MiB, world 2: each bucket takes 1.048636 s and they queue, so the step is
  // 1 + 3 + (3 x 1048.636 - 2) ms = 3147.908 ms; one bucket: 1 + 3 + 3145.788 = 3149.788 ms;
  // fp16, half the bytes (at float32's rate without --csv-fp16): 1 + 3 + (3 x 524.348 - 2) = 1575.044 ms.
  const std::string dir = temp_dir();
  {
    std::ofstream csv(dir + "/exact.csv");
    for (int n = 2; n <= 4; n += 2) {
      for (double s = 4096; s <= 1 << 20; s *= 4) {
        const double us = 2.0 * (n - 1) * (30 + s / n * 1.0);
        csv << n << "," << s << "," << us << "," << us << "\n";
      }
    }
  }
  const ProcResult r = run_one({{"cost_model", "--csv", dir + "/exact.csv", "--link", "8mbit", "--param-mb", "3.145728", "--forward-ms",
                                 "1", "--backward-ms", "3", "--bucket-cap-mb", "1", "--compare",
                                 "buckets=3147.908,one-bucket=3149.788,fp16=787.522"}},
                               30);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("the link: configured 8 Mbit/s = 1.000 MB/s each way; the fit's 1/beta = 1.000 MB/s: +0.0%"), std::string::npos)
      << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(\nbuckets\s+3\s+3145\.91 ms\s+3143\.91 ms\s+3147\.91 ms\s+3147\.91 ms\s+[-+]0\.0%)")))
      << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(\none-bucket\s+1\s+3145\.79 ms\s+3145\.79 ms\s+3149\.79 ms\s+3149\.79 ms\s+[-+]0\.0%)")))
      << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(\nfp16\s+3\s+1573\.04 ms\s+1571\.04 ms\s+1575\.04 ms\s+787\.52 ms\s+\+100\.0%)")))
      << r.output;
  EXPECT_NE(r.output.find("largest |error| of the predicted steps: 100.0%"), std::string::npos) << r.output;
  const ProcResult bad = run_one({{"cost_model", "--csv", dir + "/exact.csv", "--param-mb", "3", "--backward-ms", "3", "--compare", "fast=3"}}, 30);
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--compare: 'fast': use buckets, one-bucket, fp16 or bf16"), std::string::npos) << bad.output;
  std::system(("rm -rf " + dir).c_str());
}

// allreduce_bench --values gradients (Note [What is summed]): each rank's own values, put back
// before every all-reduce, so the last result is the sum of every rank's values, which the bench
// checks itself (without the put-back it fails: the values would have doubled per all-reduce).
TEST(CostModel, TheSweepSumsGradientValuesPutBackBeforeEachAllReduce) {
  const ProcResult r = run_one({{"02_spawn", "--nproc-per-node", "3", "--timeout", "60", "--", bin("allreduce_bench"), "--dtype",
                                 "float16", "--values", "gradients", "--max-bytes", "65536", "--rounds", "2"}},
                               120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("world 3      65536 B: plain "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--values gradients: each size's result was the sum of every rank's values"), std::string::npos) << r.output;
  const ProcResult bad = run_one({{bin("allreduce_bench"), "--values", "ones"}}, 30);
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--values"), std::string::npos) << bad.output;
  // Alone (no launcher: world size 1) there is nothing to time: refused as bad input, with the command.
  const ProcResult alone = run_one({{bin("allreduce_bench"), "--max-bytes", "4096"}}, 30);
  EXPECT_EQ(alone.exit_code, 2) << alone.output;
  EXPECT_NE(alone.output.find("world size 1: an all-reduce needs a second rank to measure; start it under 02_spawn"),
            std::string::npos) << alone.output;
}

// As on a host with two GPUs (DDP_GPU_COUNT=2, where 2 ranks would default to NCCL): the script
// measures Gloo on the CPU's cores all the same.
TEST(CostModel, OneCommandMeasuresFitsAndPredicts) {
  const std::string dir = temp_dir();
  ProcSpec s{{DDP_SOURCE_DIR "/bench/cost_model.sh", "--quick", dir + "/cost"}, {{"DDP_BUILD_DIR", DDP_BIN_DIR}, {"DDP_GPU_COUNT", "2"}}};
  const ProcResult r = run_one(s, 240);
  ASSERT_EQ(r.exit_code, 0) << tail(r.output);
  // Every point of the sweep (world 2 and 3, 4 KiB to 1 MiB) with consistent bandwidths.
  std::regex row(R"(^\s+([23])\s+(\d+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+[-+][0-9.]+%$)");
  std::istringstream in(r.output);
  std::string line;
  int rows = 0;
  while (std::getline(in, line)) {
    std::smatch m;
    if (!std::regex_match(line, m, row)) continue;
    ++rows;
    const int n = std::stoi(m[1]);
    const double bytes = std::stod(m[2]), us = std::stod(m[3]), alg = std::stod(m[4]), bus = std::stod(m[5]);
    EXPECT_NEAR(alg, bytes / us / 1e3, 0.0015 + alg * 0.01) << line;
    EXPECT_NEAR(bus, alg * 2 * (n - 1) / n, 0.0015 + bus * 0.01) << line;
  }
  EXPECT_EQ(rows, 2 * 9) << tail(r.output);
  EXPECT_NE(r.output.find("fitted ring model: alpha = "), std::string::npos);
  EXPECT_NE(r.output.find("ours vs plain c10d all-reduce: plain/ours = "), std::string::npos);
  // The bucket sweep: a predicted and a measured step for each cap.
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(\n\s+1\s+\d+\s+[0-9.]+ ms .* [0-9.]+ ms\s+[0-9.]+ ms\s+[0-9.]+%\n)"))) << tail(r.output);
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(\n\s+25\s+\d+\s+[0-9.]+ ms .* [0-9.]+ ms\s+[0-9.]+ ms\s+[0-9.]+%\n)"))) << tail(r.output);
  EXPECT_NE(r.output.find("what if: 4 node(s) x 8 ranks"), std::string::npos);
}

// The ranks apart that cost_model reads off a merged two-rank trace (Note [The slowest rank] in
// bench/ddp_sim.cpp): where each rank's backward ends (its last bucket ready, not an earlier
// one), |rank 0 - rank 1| step by step, the first two steps left out: a trace made by hand.
TEST(CostModel, RanksApartAreWhereEachRanksBackwardEnds) {
  const std::string dir = temp_dir();
  {
    std::ofstream(dir + "/exact.csv") << "# world,bytes,plain_us,ours_us\n2,1048576,1000,1000\n2,4194304,3000,3000\n";
  }
  // Rank 1 ends backward this many ms after (or before) rank 0: 50 in the two steps left out, then
  // 1, -4, 2, 6 (|d|: mean 3.25 ms, sorted 1 2 4 6); its first bucket 30 ms apart in every step.
  const std::vector<double> late_ms{50, 50, 1, -4, 2, 6};
  nlohmann::json events = nlohmann::json::array();
  for (int pid = 0; pid < 2; ++pid) {
    for (size_t i = 0; i < late_ms.size(); ++i) {
      const double start = 100000.0 * i, d = pid == 1 ? late_ms[i] * 1000 : 0;
      const auto span = [&](const char* name, double ts, double dur) {
        events.push_back({{"name", name}, {"ph", "X"}, {"pid", pid}, {"tid", 0}, {"ts", ts}, {"dur", dur}, {"args", {{"bytes", 4096}}}});
      };
      const auto instant = [&](const char* name, double ts) { events.push_back({{"name", name}, {"ph", "i"}, {"pid", pid}, {"tid", 0}, {"ts", ts}}); };
      span("forward", start, 10000);
      span("backward", start + 10000, 70000);
      instant("bucket0 ready", start + 20000 + (pid == 1 ? 30000 : 0));
      instant("bucket1 ready", start + 60000 + d);
      span("all-reduce bucket0", start + 61000 + d, 1000);
      span("optimizer", start + 85000, 1000);
    }
    events.push_back({{"name", "bucket0 ready"}, {"ph", "i"}, {"pid", pid}, {"tid", 0}, {"ts", 5e6 + pid * 9e5}});  // outside any backward
  }
  std::ofstream(dir + "/trace.json") << nlohmann::json{{"traceEvents", events}}.dump();
  const ProcResult r = run_one({{"cost_model", "--csv", dir + "/exact.csv", "--trace", dir + "/trace.json"}}, 30);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ranks apart where backward ends (the last bucket ready), |rank a - rank b| over 4 step(s), 1 pair(s) of "
                          "ranks each: mean 3.250 ms, median 4.000 ms"),
            std::string::npos)
      << r.output;
  std::system(("rm -rf " + dir).c_str());
}

// bench/one_vs_two_ranks.sh in its quick form (Note [Two ranks on two cores]): every figure it
// prints about a model is worked out from the others as it says (steps from rates, the ratio, the
// simulator's error against the measured step), the interference the simulator takes is the one
// allreduce_bench measured (its shares worked out from the times it printed: Note [Measuring
// interference]), and no predicted step is below its compute. (How close it comes is the
// benchmark's business.) As on
// a host with one GPU (DDP_GPU_COUNT=1, where a single rank would default to NCCL and its GPU):
// the script runs every rank on the CPU's cores all the same.
TEST(CostModel, OneAgainstTwoRanksMeasuredAndPredicted) {
  const std::string dir = temp_dir();
  ProcSpec s{{DDP_SOURCE_DIR "/bench/one_vs_two_ranks.sh", "--quick", dir + "/two"}, {{"DDP_BUILD_DIR", DDP_BIN_DIR}, {"DDP_GPU_COUNT", "1"}}};
  const ProcResult r = run_one(s, 240);
  ASSERT_EQ(r.exit_code, 0) << tail(r.output);
  EXPECT_NE(r.output.find("after 2 ms of computing alpha "), std::string::npos) << tail(r.output);
  const std::regex measured(R"((mlp|cnn): 1 rank ([0-9.]+) samples/s \(([0-9.]+) ms a step; ([0-9.]+) ms beside another rank's\); )"
                            R"(2 ranks ([0-9.]+) samples/s \(([0-9.]+) ms a step of 2 x 64\): ([0-9.]+)x one rank\n)"
                            R"(  ddp_sim, as on these cores [^:]*interference s = ([-0-9.]+), a = ([-0-9.]+)\): ([0-9.]+) ms = (\d+) samples/s, ([0-9.]+)x one rank \(error ([-+0-9.]+)%\)\n)"
                            R"(  ddp_sim, as on a GPU [^:]*: ([0-9.]+) ms = (\d+) samples/s, ([0-9.]+)x one rank \(error ([-+0-9.]+)%\)\n)");
  int models = 0;
  for (std::sregex_iterator m(r.output.begin(), r.output.end(), measured), end; m != end; ++m, ++models) {
    const auto d = [&](int k) { return std::stod((*m)[k]); };
    const double one = d(2), alone_ms = d(3), busy_ms = d(4), two = d(5), two_ms = d(6);
    EXPECT_NEAR(alone_ms, 64e3 / one, 0.002) << m->str();
    EXPECT_NEAR(two_ms, 128e3 / two, 0.002) << m->str();
    EXPECT_NEAR(d(7), two / one, 0.006) << m->str();
    for (int k : {10, 14}) {
      EXPECT_NEAR(d(k + 1), 128e3 / d(k), 1) << m->str();
      EXPECT_NEAR(d(k + 2), 128e3 / d(k) / one, 0.006) << m->str();
      EXPECT_NEAR(d(k + 3), (d(k) / two_ms - 1) * 100, 0.06) << m->str();
    }
    EXPECT_GE(d(10), busy_ms) << "a step is its compute and more\n" << m->str();
    // The shares: as allreduce_bench printed them, from its own times, and given to ddp_sim.
    const std::string model = (*m)[1], log = read_text(dir + "/two/interference-" + model + ".log");
    std::smatch c, a;
    ASSERT_TRUE(std::regex_search(log, c, std::regex(R"(compute: ([0-9.]+) us a (matmul|conv) alone, ([0-9.]+) us beside the all-reduce: interference s = ([-0-9.]+)\n)"))) << log;
    ASSERT_TRUE(std::regex_search(log, a, std::regex(R"(all-reduce: ([0-9.]+) us alone, ([0-9.]+) us beside the compute: slowdown a = ([-0-9.]+)\n)"))) << log;
    EXPECT_EQ(c[2], model == "mlp" ? "matmul" : "conv") << log;
    EXPECT_NEAR(std::stod(c[4]), std::stod(c[3]) / std::stod(c[1]) - 1, 0.002) << log;
    EXPECT_NEAR(std::stod(a[3]), std::stod(a[2]) / std::stod(a[1]) - 1, 0.002) << log;
    EXPECT_EQ(std::stod(c[4]), d(8)) << m->str();
    EXPECT_EQ(std::stod(a[3]), d(9)) << m->str();
    const std::string sim = read_text(dir + "/two/" + model + "-sim-cpu.txt");
    char beside[120];
    std::snprintf(beside, sizeof(beside), "beside an all-reduce, backward takes %g times as long and an all-reduce beside backward %g times",
                  1 + std::max(0.0, d(8)), 1 + std::max(0.0, d(9)));
    if (d(8) > 0 || d(9) > 0) EXPECT_NE(sim.find(beside), std::string::npos) << beside << "\n" << sim;
    // The ranks apart: cost_model's mean off the traced two-rank run, given to ddp_sim, which
    // makes the later of two ranks half of it later (Note [The slowest rank]); without it the
    // predicted step is no longer.
    const std::string apart_txt = read_text(dir + "/two/" + model + "-apart.txt");
    std::smatch ap, printed, slower, without;
    ASSERT_TRUE(std::regex_search(apart_txt, ap, std::regex(R"(\nranks apart where backward ends [^\n]*: mean ([0-9.]+) ms, median)"))) << apart_txt;
    const std::string lines = m->str();
    ASSERT_TRUE(std::regex_search(lines, printed, std::regex(R"(ranks apart ([0-9.]+) ms, interference)"))) << lines;
    EXPECT_EQ(printed[1], ap[1]) << m->str() << apart_txt;
    std::smatch given;
    ASSERT_TRUE(std::regex_search(sim, given, std::regex(R"(ranks apart by ([0-9.]+) ms \(--ranks-apart-ms\))"))) << sim;
    EXPECT_EQ(std::stod(given[1]), std::stod(ap[1])) << sim;
    ASSERT_TRUE(std::regex_search(sim, slower, std::regex(R"(the slowest of 2 ranks \(a spread of [0-9.e-]+\): the compute ([0-9.]+) ms longer)")))
        << sim;
    EXPECT_NEAR(std::stod(slower[1]), std::stod(ap[1]) / 2, 0.0011) << sim;
    const std::string after = r.output.substr(m->position() + m->length());
    ASSERT_TRUE(std::regex_search(after, without, std::regex(R"(^  the same without the ranks apart: ([0-9.]+) ms \(error ([-+0-9.]+)%\))")))
        << after.substr(0, 300);
    EXPECT_LE(std::stod(without[1]), d(10)) << m->str() << without.str();
  }
  EXPECT_EQ(models, 2) << tail(r.output);
  for (const char* model : {"mlp", "cnn"}) {  // 05 votes on stopping after every step: so does the prediction
    const std::string sim = read_text(dir + "/two/" + model + "-sim-cpu.txt");
    EXPECT_NE(sim.find("stop vote: "), std::string::npos) << model << "\n" << sim;
  }
  std::system(("rm -rf " + dir).c_str());
}

// bench/compute_after_allreduce.py, short: the MLP's compute timed after a barrier and after an
// all-reduce of its gradients (their bytes, 2143272), and the ratio it prints is of the medians it
// prints; bad flags and an unknown model exit 2. (What the ratio is here is the benchmark's business.)
TEST(CostModel, OneAgainstTwoRanksComputeAfterAllReduce) {
#ifndef DDP_REFERENCE_PYTHON
  GTEST_SKIP() << "no Python with PyTorch configured (DDP_REFERENCE_PYTHON): bench/compute_after_allreduce.py not run";
#else
  const std::string script = DDP_SOURCE_DIR "/bench/compute_after_allreduce.py";
  const ProcResult r = run_one({{DDP_REFERENCE_PYTHON, script, "--steps", "30", "--rounds", "1"}}, 120);
  ASSERT_EQ(r.exit_code, 0) << tail(r.output);
  std::smatch m;
  const std::regex barrier(R"(after the barrier +: median ([0-9.]+) ms, mean [0-9.]+ ms \(20 steps\))"),
      allreduce(R"(after the all-reduce: median ([0-9.]+) ms, mean [0-9.]+ ms \(20 steps\))"),
      ratio(R"(compute after an all-reduce / after a barrier: ([0-9.]+)x)");
  ASSERT_TRUE(std::regex_search(r.output, m, barrier)) << r.output;
  const double after_barrier = std::stod(m[1]);
  ASSERT_TRUE(std::regex_search(r.output, m, allreduce)) << r.output;
  const double after_allreduce = std::stod(m[1]);
  ASSERT_TRUE(std::regex_search(r.output, m, ratio)) << r.output;
  EXPECT_NEAR(std::stod(m[1]), after_allreduce / after_barrier, 0.006) << r.output;
  EXPECT_NE(r.output.find("the all-reduce of 2143272 bytes: median "), std::string::npos) << r.output;
  const ProcResult bad = run_one({{DDP_REFERENCE_PYTHON, script, "--steps", "5"}}, 60);
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--steps must be at least 20"), std::string::npos) << bad.output;
  const ProcResult unknown = run_one({{DDP_REFERENCE_PYTHON, script, "--model", "resnet50"}}, 60);
  EXPECT_EQ(unknown.exit_code, 2) << unknown.output;
  EXPECT_NE(unknown.output.find("--model resnet50: one of the course's models, mlp, cnn, cnn_bn"), std::string::npos) << unknown.output;
#endif
}

TEST(CostModel, PredictsAStepGivenByFlagsAndRefusesHalfAPlan) {
  // Exact ring times (alpha 30 us, beta 0.8 ns/byte) fit exactly; 3 MiB of gradients over a
  // 3 ms backward at cap 1 MiB, world 2: three buckets of 0.89886 ms each, ready at 1, 2, 3 ms;
  // only the last is exposed: step = 1 + 3 + 0.899 = 4.90 ms, all-reduce 2.70 ms in all.
  const std::string dir = temp_dir();
  {
    std::ofstream csv(dir + "/exact.csv");
    for (int n = 2; n <= 3; ++n) {
      for (double s = 4096; s <= 1 << 20; s *= 4) {
        const double us = 2.0 * (n - 1) * (30 + s / n * 0.8e-3);
        csv << n << "," << s << "," << us << "," << us << "\n";
      }
    }
  }
  const ProcResult r = run_one({{"cost_model", "--csv", dir + "/exact.csv", "--param-mb", "3.145728", "--forward-ms", "1",
                                 "--backward-ms", "3", "--bucket-cap-mb", "1"}},
                               30);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("alpha = 30.0 us per step, beta = 0.800 ns/byte"), std::string::npos) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(\n\s+1\s+3\s+2\.70 ms\s+0\.90 ms\s+67%\s+4\.90 ms)"))) << r.output;
  const ProcResult half = run_one({{"cost_model", "--csv", dir + "/exact.csv", "--param-mb", "3"}}, 30);
  EXPECT_EQ(half.exit_code, 2) << half.output;
  EXPECT_NE(half.output.find("give at least --param-mb and --backward-ms"), std::string::npos) << half.output;
}
