// --link: simulated nodes as hosts on shaped links (Note [Nodes as hosts]). These need root
// (network namespaces) and iproute2; they skip saying so elsewhere.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "common/launch/command.h"
#include "proc.h"

using namespace ddp_test;

namespace {

std::string links_skip_reason() {
  if (::geteuid() != 0) return "needs root: --link creates network namespaces (scripts/test.sh runs as root)";
  for (const char* tool : {"ip", "tc", "nsenter", "setpriv"}) {
    if (!ddp::run_command({tool, "-V"}, 10).started) return std::string("needs ") + tool + " (iproute2, util-linux)";
  }
  return "";
}

#define SKIP_WITHOUT_NAMESPACES()                                                 \
  do {                                                                            \
    if (const std::string why = links_skip_reason(); !why.empty()) GTEST_SKIP() << why; \
  } while (0)

// The network namespaces that processes of this machine are in now (their inode numbers).
std::set<std::string> net_namespaces() {
  auto r = ddp::run_command({"sh", "-c", "readlink /proc/[0-9]*/ns/net 2>/dev/null | sort -u"}, 10);
  std::set<std::string> all;
  std::istringstream in(r.output);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) all.insert(line);
  }
  return all;
}

// What the host's own network shows: its links and its named namespaces.
std::string host_network() {
  return ddp::run_command({"sh", "-c", "ip -o link | cut -d: -f2; ip netns list"}, 10).output;
}

std::vector<std::string> trainer_args(const std::string& out) {
  return {bin("05_ddp"), "--model", "cnn", "--max-steps", "6", "--train-samples", "768", "--test-samples", "100",
          "--log-every", "1000", "--timeout", "30", "--out", out};
}

}  // namespace

// The same training on two nodes joined by 127.0.0.1 and on two hosts with 1 Gbit/s links:
// bit-identical. Gloo must have bound each node's own address: had it fallen back to loopback,
// ranks on node1 could not have reached node0's (the namespaces share no loopback).
TEST(Links, NodesOnShapedLinksTrainToTheLoopbackFingerprint) {
  SKIP_WITHOUT_NAMESPACES();
  const std::string dir = temp_dir();
  const std::vector<std::string> nodes = {"02_spawn", "--nnodes", "2", "--nproc-per-node", "2", "--timeout", "30"};
  auto loopback = run_one({plus(plus(nodes, {"--"}), trainer_args(dir + "/loopback"))}, 120);
  auto linked = run_one({plus(plus(nodes, {"--link", "1gbit", "--"}), trainer_args(dir + "/linked"))}, 120);
  ASSERT_EQ(loopback.exit_code, 0) << loopback.output;
  ASSERT_EQ(linked.exit_code, 0) << linked.output;
  EXPECT_NE(linked.output.find("[launcher] 2 node(s) as hosts on 1 Gbit/s links to one bridge: node0 10.0.0.1, node1 10.0.0.2"),
            std::string::npos) << linked.output;
  EXPECT_NE(linked.output.find("store on 10.0.0.1:"), std::string::npos) << linked.output;
  EXPECT_EQ(fingerprints(loopback.output).size(), 1u) << loopback.output;
  EXPECT_EQ(fingerprints(linked.output), fingerprints(loopback.output)) << linked.output;
  std::system(("rm -rf " + dir).c_str());
}

// A link carries no more than its rate. A ring all-reduce of S bytes at world 2 sends S bytes
// each way (half in the reduce-scatter, half in the all-gather), so 32 MiB over 200 Mbit/s takes
// at least 32 MiB x 8 / 2e8 = 1.34 s; on loopback it takes tens of milliseconds.
TEST(Links, AnAllReduceTakesAtLeastItsBytesOverTheRate) {
  SKIP_WITHOUT_NAMESPACES();
  const std::string dir = temp_dir();
  const long bytes = 32L << 20;
  auto r = run_one({{"02_spawn", "--nnodes", "2", "--nproc-per-node", "1", "--link", "200mbit", "--timeout", "60", "--", bin("allreduce_bench"),
                     "--min-bytes", std::to_string(bytes), "--max-bytes", std::to_string(bytes), "--rounds", "1", "--csv", dir + "/a.csv"}},
                   120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream csv(dir + "/a.csv");
  std::string line;
  std::getline(csv, line);  // world,bytes,plain_us,ours_us (each the best of its all-reduces)
  ASSERT_TRUE(std::regex_match(line, std::regex("2," + std::to_string(bytes) + ",[-+.e0-9]+,[-+.e0-9]+"))) << line << "\n" << r.output;
  const double plain_us = std::stod(line.substr(line.find(',', 2) + 1));
  const double floor_us = bytes * 8 / 2e8 * 1e6;
  // tbf lets one burst (64 KiB) through at once: the floor less that.
  EXPECT_GE(plain_us, floor_us * (1 - 65536.0 / bytes)) << line;
  std::system(("rm -rf " + dir).c_str());
}

// bench/cost_model.sh --link in its quick form: the sweep between hosts, the fit against the
// rate, and the CNN's three variants measured and predicted. (Its accuracy is the benchmark's
// business: bench/README.md; here, that every part runs and reports.)
TEST(Links, TheCostModelRunsBetweenHostsInOneCommand) {
  SKIP_WITHOUT_NAMESPACES();
  const std::string dir = temp_dir();
  ProcSpec s{{DDP_SOURCE_DIR "/bench/cost_model.sh", "--quick", "--link", "1gbit", dir + "/link"}, {{"DDP_BUILD_DIR", DDP_BIN_DIR}}};
  const ProcResult r = run_one(s, 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("the link: configured 1 Gbit/s = 125.000 MB/s each way; the fit's 1/beta = "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("fitted to the float16 all-reduces"), std::string::npos) << r.output;
  // Compute beside an all-reduce between the hosts, as float32 and as the fp16 hook sends it
  // (Note [Measuring interference]), handed to ddp_sim.
  EXPECT_NE(r.output.find("== compute beside an all-reduce between the hosts"), std::string::npos) << r.output;
  for (const char* dtype : {"float32", "float16"}) {
    const std::string log = read_text(dir + "/link/interference-" + std::string(dtype).substr(5) + ".log");
    EXPECT_NE(log.find(std::string("(") + dtype), std::string::npos) << log;
    EXPECT_NE(log.find("us a conv alone"), std::string::npos) << log;
    EXPECT_NE(log.find("interference s = "), std::string::npos) << log;
  }
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(interference s [0-9.]+, a [0-9.]+;)"))) << r.output;
  for (const char* variant : {"buckets", "one-bucket", "fp16"}) {
    EXPECT_TRUE(std::regex_search(r.output, std::regex(std::string("\n") + variant + R"(\s+\d+\s+[0-9.]+ ms\s+[0-9.]+ ms\s+[0-9.]+ ms\s+[0-9.]+ ms\s+[-+][0-9.]+%)")))
        << variant << "\n" << r.output;
  }
  EXPECT_NE(r.output.find("largest |error| of the predicted steps: "), std::string::npos) << r.output;
  // The same three from bench/ddp_sim (the CNN's profile, the link's rate, the fitted alpha): each
  // error is its predicted step against the measured one cost_model was given.
  EXPECT_NE(r.output.find("== the simulator (bench/ddp_sim: 2 nodes x 1 rank, 1gbit links = 1 Gb/s, alpha "), std::string::npos) << r.output;
  for (const char* variant : {"buckets", "one-bucket", "fp16"}) {
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.output, m, std::regex(std::string("\n") + variant +
                                                          R"(: measured: ([0-9.]+) ms; predicted ([0-9.]+) ms: ([-+][0-9.]+)%; overlap share: [0-9.]+%)")))
        << variant << "\n" << r.output;
    EXPECT_NEAR(std::stod(m[3]), (std::stod(m[2]) / std::stod(m[1]) - 1) * 100, 0.06) << m.str();
  }
  std::system(("rm -rf " + dir).c_str());
}

// Killed with SIGKILL, the launcher can run no clean-up: the kernel must do it. Every namespace
// seen during the run is gone after it, and the host's links and named namespaces are as before.
void expect_nothing_left_behind(const std::vector<std::string>& argv, const std::string& ready_line,
                                const std::map<std::string, std::string>& env = {}) {
  const std::set<std::string> before = net_namespaces();
  const std::string host_before = host_network();
  ProcSpec launcher{argv, env};
  launcher.signal = SIGKILL;
  launcher.signal_after_s = 8;
  // Looked at four times a second until the kill: a loaded machine may take seconds to set up.
  ProcSpec look{{"/bin/sh", "-c", "for i in $(seq 30); do readlink /proc/[0-9]*/ns/net 2>/dev/null; sleep 0.25; done | sort -u"}};
  look.start_delay_s = 0.5;
  auto rs = run_all({launcher, look}, 60);
  EXPECT_EQ(rs[0].term_signal, SIGKILL) << rs[0].output;
  EXPECT_NE(rs[0].output.find(ready_line), std::string::npos) << rs[0].output;
  std::set<std::string> during;
  std::istringstream in(rs[1].output);
  for (std::string ns; std::getline(in, ns);) {
    if (!ns.empty() && !before.count(ns)) during.insert(ns);
  }
  EXPECT_GE(during.size(), 3u) << "the switch and two nodes should have had namespaces of their own:\n" << rs[1].output;
  std::set<std::string> left;
  for (int k = 0; k < 50; ++k) {  // the kernel frees them as the last process in each exits
    const std::set<std::string> now = net_namespaces();
    left.clear();
    for (const auto& ns : during) {
      if (now.count(ns)) left.insert(ns);
    }
    if (left.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(left.empty()) << left.size() << " namespace(s) of the run outlived its launcher: "
                            << ddp::run_command({"lsns", "-t", "net"}, 10).output;
  EXPECT_EQ(host_network(), host_before);
}

TEST(Links, NothingIsLeftBehindWhenTheLauncherIsKilled) {
  SKIP_WITHOUT_NAMESPACES();
  expect_nothing_left_behind({"02_spawn", "--nnodes", "2", "--nproc-per-node", "1", "--link", "100mbit", "--fail-rank", "1",
                              "--fail-mode", "hang", "--timeout", "60"},
                             "injecting fault: --fail-mode hang");
}

// The job must still be training when it is killed, 8 s in: endless epochs (with the default 3,
// 18 steps, a fast machine ended the job first and nothing was killed).
// The simulator's own folder, which a SIGKILL leaves, is made under the TMPDIR it is given (the
// test's folder, removed after it), not in /tmp.
TEST(Links, NothingIsLeftBehindWhenTheSimulatedSlurmIsKilled) {
  SKIP_WITHOUT_NAMESPACES();
  const std::string dir = temp_dir();
  std::filesystem::create_directories(dir + "/tmp");
  expect_nothing_left_behind({"06_slurm", "--local", "--nodes", "2", "--tasks-per-node", "1", "--link", "100mbit", "--out-dir", dir,
                              "--", "--model", "cnn", "--epochs", "100000", "--train-samples", "768", "--test-samples", "100",
                              "--log-every", "1", "--timeout", "60"},
                             "step 1", {{"TMPDIR", dir + "/tmp"}});
  int folders = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/tmp")) folders += e.path().filename().string().rfind("06_slurm_local_", 0) == 0;
  EXPECT_EQ(folders, 1) << "the killed simulator's folder is not in the TMPDIR it was given";
  std::system(("rm -rf " + dir).c_str());
}

// Without root the reason is given, with exit 2; and so are a rate that is not one, and a
// --master-addr that --link would override.
TEST(Links, RefusedWithTheReasonWithoutRootOrWithABadRate) {
  const std::vector<std::string> link = {"--nnodes", "2", "--nproc-per-node", "1", "--link", "100mbit", "--timeout", "5"};
  std::vector<std::string> as_user = plus({"02_spawn"}, link);
  if (::geteuid() == 0) {  // setpriv (util-linux): the same command as the user nobody
    as_user = plus({"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", bin("02_spawn")}, link);
  }
  auto r = run_one({as_user}, 30);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--link needs root: it creates network namespaces"), std::string::npos) << r.output;

  auto bad = run_one({{"02_spawn", "--nnodes", "2", "--link", "fast"}}, 30);
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--link 'fast': give a rate such as 100mbit, 1gbit or 500kbit"), std::string::npos) << bad.output;
  auto addr = run_one({plus({"02_spawn", "--master-addr", "127.0.0.1"}, link)}, 30);
  EXPECT_EQ(addr.exit_code, 2) << addr.output;
  EXPECT_NE(addr.output.find("--link: the store is on node 0's address; leave --master-addr out"), std::string::npos) << addr.output;
  auto slurm = run_one({{"06_slurm", "--nodes", "2", "--link", "1gbit"}}, 30);
  EXPECT_EQ(slurm.exit_code, 2) << slurm.output;
  EXPECT_NE(slurm.output.find("--link shapes the simulated nodes' links: add --local"), std::string::npos) << slurm.output;
}

// Chapter 08's replicas, each a host of its own on 100 Mbit/s links, the lighthouse on the first
// (08's --link): without a fault the same bits as on loopback; with r1 killed inside its all-reduce,
// a replacement on r1's host heals over the link, and the launcher's checks pass. Gloo and the
// lighthouse's connections had to use the hosts' addresses: the namespaces share no loopback.
TEST(Links, ChapterEightReplicasOnShapedLinksTrainThroughALostReplica) {
  SKIP_WITHOUT_NAMESPACES();
  const std::string dir = temp_dir();
  auto loopback = run_one({{"08_fault_tolerance", "--replicas", "2", "--out", dir + "/loopback"}}, 90);
  auto linked = run_one({{"08_fault_tolerance", "--replicas", "2", "--link", "100mbit", "--out", dir + "/linked"}}, 90);
  ASSERT_EQ(loopback.exit_code, 0) << loopback.output;
  ASSERT_EQ(linked.exit_code, 0) << linked.output;
  EXPECT_NE(linked.output.find("[launcher] 2 replicas as hosts 10.0.0.1.. on 100 Mbit/s links to one bridge"), std::string::npos)
      << linked.output;
  EXPECT_NE(linked.output.find("a lighthouse on 10.0.0.1:"), std::string::npos) << linked.output;
  std::smatch a, b;
  const std::regex fp("all with params fingerprint ([0-9a-f]{16}): OK");
  ASSERT_TRUE(std::regex_search(loopback.output, a, fp)) << loopback.output;
  ASSERT_TRUE(std::regex_search(linked.output, b, fp)) << linked.output;
  EXPECT_EQ(a[1].str(), b[1].str());
  auto fault = run_one({{"08_fault_tolerance", "--replicas", "2", "--link", "100mbit", "--inject", "r1:allreduce@8", "--replace-after",
                         "0", "--steps", "100", "--step-ms", "30", "--momentum", "0.9", "--out", dir + "/fault"}},
                       120);
  EXPECT_EQ(fault.exit_code, 0) << fault.output;
  EXPECT_NE(fault.output.find("[replica r2] quorum"), std::string::npos) << fault.output;
  EXPECT_NE(fault.output.find("healing from r0"), std::string::npos) << fault.output;
  EXPECT_EQ(count(fault.output, ": OK\n"), 3) << fault.output;
  EXPECT_EQ(count(fault.output, "FAILED"), 0) << fault.output;
  std::system(("rm -rf " + dir).c_str());
}
