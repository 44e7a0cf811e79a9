// Unit tests of rank resolution: precedence flag > torchrun > Slurm > default, parsing, validation.
#include <gtest/gtest.h>

#include <map>

#include "common/basics/errors.h"
#include "common/launch/rank_env.h"

using ddp::CommonFlags;
using ddp::RankInfo;

namespace {

ddp::EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars](const std::string& k) -> std::optional<std::string> {
    auto it = vars.find(k);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

// No real GPU is asked for: DDP_GPU_COUNT in `vars` says how many the backend choice sees.
RankInfo resolve(std::map<std::string, std::string> vars, CommonFlags f = {}) {
  auto env = env_of(std::move(vars));
  return ddp::resolve_rank_info(f, env, [env] { return ddp::gpu_count_from(env, [] { return 0; }); });
}

const std::map<std::string, std::string> kSlurm = {
    {"SLURM_PROCID", "5"},       {"SLURM_NTASKS", "8"},         {"SLURM_LOCALID", "1"},
    {"SLURM_NODEID", "1"},       {"SLURM_TASKS_PER_NODE", "4(x2)"}, {"SLURM_JOB_NODELIST", "gpu[07-08]"},
    {"SLURM_JOB_ID", "123456"},   {"SLURM_STEP_ID", "0"},        {"SLURM_NNODES", "2"},
    {"SLURM_STEP_NODELIST", "gpu[07-08]"}};

}  // namespace

TEST(RankEnv, DefaultsAreASingleLocalProcess) {
  RankInfo r = resolve({});
  EXPECT_EQ(r.rank.value, 0);
  EXPECT_EQ(r.world_size.value, 1);
  EXPECT_EQ(r.master_addr.value, "127.0.0.1");
  EXPECT_EQ(r.master_port.value, 29500);
  EXPECT_EQ(r.backend.value, "gloo");
  EXPECT_EQ(r.init.value, "env://");
  EXPECT_EQ(r.rank.source, "default");
  EXPECT_NO_THROW(ddp::validate(r));
}

TEST(RankEnv, SlurmVariablesAreUsedWhenNothingElseIsSet) {
  RankInfo r = resolve(kSlurm);
  EXPECT_EQ(r.rank.value, 5);
  EXPECT_EQ(r.rank.source, "env SLURM_PROCID");
  EXPECT_EQ(r.world_size.value, 8);
  EXPECT_EQ(r.local_rank.value, 1);
  EXPECT_EQ(r.node_rank.value, 1);
  EXPECT_EQ(r.local_world_size.value, 4);
  EXPECT_EQ(r.master_addr.value, "gpu07");  // first host of the list, expanded without scontrol
  EXPECT_EQ(r.master_port.value, 15000 + 123456 % 10000);
  EXPECT_NO_THROW(ddp::validate(r));
}

TEST(RankEnv, TorchrunVariablesBeatSlurm) {
  auto vars = kSlurm;
  vars.insert({{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "2"},
               {"GROUP_RANK", "1"}, {"MASTER_ADDR", "10.1.2.3"}, {"MASTER_PORT", "29600"}});
  RankInfo r = resolve(vars);
  EXPECT_EQ(r.rank.value, 2);
  EXPECT_EQ(r.rank.source, "env RANK");
  EXPECT_EQ(r.world_size.value, 4);
  EXPECT_EQ(r.local_rank.value, 0);
  EXPECT_EQ(r.local_world_size.value, 2);
  EXPECT_EQ(r.node_rank.value, 1);
  EXPECT_EQ(r.master_addr.value, "10.1.2.3");
  EXPECT_EQ(r.master_port.value, 29600);
  EXPECT_EQ(r.master_port.source, "env MASTER_PORT");
}

TEST(RankEnv, FlagsBeatEverything) {
  auto vars = kSlurm;
  vars.insert({{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "10.1.2.3"}, {"MASTER_PORT", "29600"}});
  CommonFlags f;
  f.rank = 1;
  f.world_size = 3;
  f.master_addr = "127.0.0.1";
  f.master_port = 30000;
  f.backend = "gloo";
  f.timeout_s = 2.5;
  RankInfo r = resolve(vars, f);
  EXPECT_EQ(r.rank.value, 1);
  EXPECT_EQ(r.rank.source, "--rank");
  EXPECT_EQ(r.world_size.value, 3);
  EXPECT_EQ(r.master_addr.value, "127.0.0.1");
  EXPECT_EQ(r.master_port.value, 30000);
  EXPECT_EQ(r.timeout().count(), 2500);
  EXPECT_EQ(r.timeout_s.source, "--timeout");
}

TEST(RankEnv, LocalRankDefaultsToRankOnOneNode) {
  CommonFlags f;
  f.rank = 3;
  f.world_size = 4;
  RankInfo r = resolve({}, f);
  EXPECT_EQ(r.local_rank.value, 3);
  EXPECT_EQ(r.local_world_size.value, 4);
  EXPECT_EQ(r.node_rank.value, 0);
}

TEST(RankEnv, AgentStoreOfTorchrunIsJoinedUnderItsAttemptPrefix) {
  RankInfo r = resolve({{"TORCHELASTIC_USE_AGENT_STORE", "True"}, {"TORCHELASTIC_RESTART_COUNT", "2"}});
  EXPECT_TRUE(r.external_store.value);
  EXPECT_EQ(r.store_prefix, "/worker/attempt_2");
  EXPECT_FALSE(resolve({{"TORCHELASTIC_USE_AGENT_STORE", "False"}}).external_store.value);
  EXPECT_FALSE(resolve({}).external_store.value);
}

TEST(RankEnv, MalformedVariablesAreRefusedByName) {
  try {
    resolve({{"RANK", "one"}});
    FAIL() << "RANK=one was accepted";
  } catch (const ddp::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("RANK='one'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(resolve({{"WORLD_SIZE", "4x"}}), ddp::UsageError);
  EXPECT_THROW(resolve({{"MASTER_PORT", ""}}), ddp::UsageError);
  EXPECT_THROW(resolve({{"SLURM_JOB_NODELIST", "node[1-2"}}), ddp::UsageError);
}

TEST(RankEnv, ValidationNamesTheProblem) {
  auto refused = [](CommonFlags f, const std::string& needle) {
    try {
      ddp::validate(resolve({}, f));
    } catch (const ddp::UsageError& e) {
      return std::string(e.what()).find(needle) != std::string::npos ? std::string() : std::string(e.what());
    }
    return std::string("accepted");
  };
  CommonFlags f;
  f.rank = 2, f.world_size = 2;
  EXPECT_EQ(refused(f, "rank 2 (from --rank) is out of range for world size 2"), "");
  f = {}, f.world_size = 0;
  EXPECT_EQ(refused(f, "world size must be at least 1"), "");
  f = {}, f.master_port = 70000;
  EXPECT_EQ(refused(f, "port 70000"), "");
  f = {}, f.master_port = 0;
  EXPECT_EQ(refused(f, "port 0"), "");
  f = {}, f.backend = "mpi";
  EXPECT_EQ(refused(f, "unknown backend 'mpi'"), "");
  f = {}, f.init = "tcp://x:1";
  EXPECT_EQ(refused(f, "unknown init method"), "");
  f = {}, f.init = "file://relative";
  EXPECT_EQ(refused(f, "unknown init method"), "");
  f = {}, f.timeout_s = -1;
  EXPECT_EQ(refused(f, "timeout must be a positive"), "");
}

TEST(RankEnv, ExplainSaysWhereEachValueCameFrom) {
  CommonFlags f;
  f.rank = 1;
  std::string text = ddp::explain(resolve({{"WORLD_SIZE", "4"}, {"SLURM_JOB_NODELIST", "n[3-4]"}}, f));
  EXPECT_NE(text.find("rank             = 1   <- --rank"), std::string::npos) << text;
  EXPECT_NE(text.find("world_size       = 4   <- env WORLD_SIZE"), std::string::npos) << text;
  EXPECT_NE(text.find("master_addr      = n3   <- first host of env SLURM_JOB_NODELIST"), std::string::npos) << text;
}

// ---- a Slurm task checks its job: see Note [A Slurm task checks its job] ----

std::string refusal(std::map<std::string, std::string> vars, CommonFlags f = {}) {
  try {
    resolve(std::move(vars), f);
  } catch (const ddp::UsageError& e) {
    return e.what();
  }
  return "accepted";
}

TEST(RankEnv, TheBatchScriptItselfIsNotARank) {
  auto vars = kSlurm;
  vars.erase("SLURM_STEP_ID");
  vars["SLURM_PROCID"] = "0";
  EXPECT_NE(refusal(vars).find("this is the batch script of Slurm job 123456 (SLURM_PROCID is set, SLURM_STEP_ID is not)"),
            std::string::npos)
      << refusal(vars);
  vars["SLURM_NTASKS"] = "1", vars["SLURM_TASKS_PER_NODE"] = "1", vars["SLURM_NNODES"] = "1";
  vars["SLURM_STEP_NODELIST"] = "gpu07";
  EXPECT_EQ(refusal(vars), "accepted");  // a one-task job may run its one rank in the script
}

TEST(RankEnv, AWorldSizeThatDisagreesWithSlurmsTaskCountIsRefused) {
  CommonFlags f;
  f.world_size = 4;
  EXPECT_NE(refusal(kSlurm, f).find("world size 4 (from --world-size) disagrees with Slurm's task count SLURM_NTASKS=8"),
            std::string::npos)
      << refusal(kSlurm, f);
  auto vars = kSlurm;
  vars["WORLD_SIZE"] = "2";
  EXPECT_NE(refusal(vars).find("(from env WORLD_SIZE) disagrees"), std::string::npos) << refusal(vars);
  // With the rank given too, Slurm only hosts the processes (one task per node running a launcher):
  // then the ranks are not Slurm's tasks and nothing is compared.
  f.rank = 1;
  EXPECT_EQ(refusal(kSlurm, f), "accepted");
}

TEST(RankEnv, ASlurmEnvironmentThatContradictsItselfIsRefused) {
  auto vars = kSlurm;
  vars["SLURM_TASKS_PER_NODE"] = "4,3";
  EXPECT_NE(refusal(vars).find("SLURM_TASKS_PER_NODE='4,3' adds up to 7 tasks, SLURM_NTASKS says 8"), std::string::npos)
      << refusal(vars);
  vars = kSlurm, vars["SLURM_TASKS_PER_NODE"] = "4(x2)", vars["SLURM_NNODES"] = "3";
  EXPECT_NE(refusal(vars).find("lists 2 nodes, SLURM_NNODES says 3"), std::string::npos) << refusal(vars);
  vars = kSlurm, vars["SLURM_STEP_NODELIST"] = "gpu[07-09]", vars["SLURM_NNODES"] = "2";
  EXPECT_NE(refusal(vars).find("SLURM_STEP_NODELIST='gpu[07-09]' has 3 hosts, SLURM_NNODES says 2"), std::string::npos)
      << refusal(vars);
  vars = kSlurm, vars["SLURM_TASKS_PER_NODE"] = "4(x2";
  EXPECT_NE(refusal(vars).find("malformed Slurm tasks per node '4(x2'"), std::string::npos) << refusal(vars);
}

TEST(RankEnv, ExplainShowsTheSlurmJob) {
  auto vars = kSlurm;
  vars["SLURM_RESTART_COUNT"] = "2";
  const std::string text = ddp::explain(resolve(vars));
  EXPECT_NE(text.find("rank             = 5   <- env SLURM_PROCID"), std::string::npos) << text;
  EXPECT_NE(text.find("slurm            = job 123456, restart 2, step 0, SLURM_STEP_NODELIST=gpu[07-08] -> gpu07 gpu08, "
                      "SLURM_TASKS_PER_NODE=4(x2)"),
            std::string::npos)
      << text;
}

// Note [Choosing the backend], for the hosts a learner meets: none, one, two GPUs.
// 02_spawn --nnodes 2 --nproc-per-node 1 on a one-GPU host: each simulated node has one local
// rank, but both share the one GPU, and NCCL refuses two ranks on one GPU ("Duplicate GPU
// detected", seen on an H100 host). The choice counts every rank of the host, and each rank
// takes its own GPU slot, node after node.
TEST(RankEnv, SimulatedNodesShareTheHostsGpus) {
  std::map<std::string, std::string> node1 = {{"RANK", "1"},       {"WORLD_SIZE", "2"},     {"LOCAL_RANK", "0"},
                                              {"LOCAL_WORLD_SIZE", "1"}, {"GROUP_RANK", "1"}, {"DDP_SIMULATED_NODES", "2"},
                                              {"DDP_GPU_COUNT", "1"}};
  RankInfo one = resolve(node1);
  EXPECT_EQ(one.backend.value, "gloo");
  EXPECT_EQ(one.backend.source,
            "default: 1 GPU (env DDP_GPU_COUNT) for 2 local ranks (2 simulated nodes); NCCL needs one GPU per rank");
  EXPECT_EQ(one.gpu_slot(), 1);
  EXPECT_EQ(one.ranks_on_host(), 2);
  node1["DDP_GPU_COUNT"] = "2";
  RankInfo two = resolve(node1);
  EXPECT_EQ(two.backend.value, "nccl");
  EXPECT_EQ(two.gpu_slot(), 1);  // not GPU 0, which rank 0 on simulated node 0 takes
  node1.erase("DDP_SIMULATED_NODES");  // real nodes: each has its own GPU 0
  RankInfo real = resolve(node1);
  EXPECT_EQ(real.gpu_slot(), 0);
  EXPECT_EQ(real.ranks_on_host(), 1);
  node1["DDP_SIMULATED_NODES"] = "0";
  EXPECT_THROW(resolve(node1), ddp::UsageError);
}

TEST(RankEnv, DefaultBackendIsNcclOnlyWhenEveryLocalRankHasItsOwnGpu) {
  const std::map<std::string, std::string> two_local = {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"}};
  auto with_gpus = [&](const std::string& n) {
    auto vars = two_local;
    vars["DDP_GPU_COUNT"] = n;
    return resolve(vars);
  };
  RankInfo none = resolve(two_local);  // the real count of this test: 0
  EXPECT_EQ(none.backend.value, "gloo");
  EXPECT_EQ(none.backend.source, "default: no GPU visible to LibTorch");
  EXPECT_EQ(none.backend_note, "");  // a CPU laptop: nothing to explain
  RankInfo zero = with_gpus("0");
  EXPECT_EQ(zero.backend.value, "gloo");
  EXPECT_EQ(zero.backend.source, "default: no GPU (env DDP_GPU_COUNT)");
  RankInfo one = with_gpus("1");  // the learner's one-GPU laptop, --nproc-per-node 2
  EXPECT_EQ(one.backend.value, "gloo");
  EXPECT_EQ(one.backend.source, "default: 1 GPU (env DDP_GPU_COUNT) for 2 local ranks; NCCL needs one GPU per rank");
  EXPECT_NE(one.backend_note.find("backend gloo on the CPU: host "), std::string::npos) << one.backend_note;
  EXPECT_NE(one.backend_note.find("has 1 GPU (env DDP_GPU_COUNT) for 2 local ranks, and NCCL needs one GPU per rank"),
            std::string::npos) << one.backend_note;
  RankInfo two = with_gpus("2");
  EXPECT_EQ(two.backend.value, "nccl");
  EXPECT_EQ(two.backend.source, "default: 2 GPUs (env DDP_GPU_COUNT) for 2 local ranks, one GPU each");
  EXPECT_EQ(two.backend_note, "");
  EXPECT_EQ(with_gpus("8").backend.value, "nccl");
  // One rank with one GPU: NCCL.
  EXPECT_EQ(resolve({{"DDP_GPU_COUNT", "1"}}).backend.value, "nccl");
  // The flag wins, both ways, and says so.
  CommonFlags f;
  f.backend = "gloo";
  auto vars = two_local;
  vars["DDP_GPU_COUNT"] = "2";
  RankInfo pinned = resolve(vars, f);
  EXPECT_EQ(pinned.backend.value, "gloo");
  EXPECT_EQ(pinned.backend.source, "--backend");
  f.backend = "nccl";
  EXPECT_EQ(resolve(two_local, f).backend.value, "nccl");  // refused later, with a GPU check (check_can_start)
  // Slurm: 4 tasks on this node and 4 GPUs -> NCCL; 2 GPUs -> Gloo.
  auto slurm = kSlurm;
  slurm["DDP_GPU_COUNT"] = "4";
  EXPECT_EQ(resolve(slurm).backend.value, "nccl");
  slurm["DDP_GPU_COUNT"] = "2";
  EXPECT_EQ(resolve(slurm).backend.value, "gloo");
}

TEST(RankEnv, AGpuCountThatIsNotACountIsRefused) {
  for (const char* bad : {"two", "-1", "1.5", ""}) {
    try {
      resolve({{"DDP_GPU_COUNT", bad}});
      ADD_FAILURE() << "accepted DDP_GPU_COUNT='" << bad << "'";
    } catch (const ddp::UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("DDP_GPU_COUNT"), std::string::npos) << e.what();
    }
  }
  // Never asked when --backend is given: counting GPUs starts CUDA (a launcher must not).
  CommonFlags f;
  f.backend = "gloo";
  bool asked = false;
  ddp::resolve_rank_info(f, env_of({}), [&] { asked = true; return ddp::GpuCount{0, ""}; });
  EXPECT_FALSE(asked);
}
