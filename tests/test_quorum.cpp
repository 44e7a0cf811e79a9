// Chapter 08's quorum rules (08_fault_tolerance/quorum.h), one case each, in one process.
#include <gtest/gtest.h>

#include <cerrno>
#include <csignal>

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "08_fault_tolerance/quorum.h"
#include "08_fault_tolerance/replica_group.h"
#include "proc.h"

using namespace ch08;

namespace {

LighthouseState asking(const std::vector<std::pair<std::string, int64_t>>& who, double at = 0) {
  LighthouseState s;
  for (const auto& [id, step] : who) s.asked[id] = {Member{id, step, "pid", 0}, at}, s.heartbeats[id] = at;
  return s;
}
std::vector<std::string> ids(const Decision& d) {
  std::vector<std::string> out;
  if (d.members)
    for (const Member& m : *d.members) out.push_back(m.replica_id);
  return out;
}

}  // namespace

TEST(Quorum, EveryAliveReplicaAskingFormsOneSortedById) {
  LighthouseState s = asking({{"r2", 0}, {"r0", 0}, {"r1", 0}});
  EXPECT_EQ(ids(quorum_compute(0.1, s, {})), (std::vector<std::string>{"r0", "r1", "r2"}));
}

TEST(Quorum, AStaleHeartbeatIsNotACandidateAndAnAliveStragglerIsWaitedForUntilTheJoinTimeout) {
  LighthouseOptions o;
  o.join_timeout_s = 1, o.heartbeat_timeout_s = 1;
  LighthouseState s = asking({{"r0", 0}, {"r1", 0}}, 0);
  s.heartbeats["r2"] = 0.5;  // alive, not asking
  EXPECT_FALSE(quorum_compute(0.9, s, o).members) << quorum_compute(0.9, s, o).why;
  s.heartbeats["r0"] = s.heartbeats["r1"] = 1.0;
  EXPECT_EQ(ids(quorum_compute(1.2, s, o)), (std::vector<std::string>{"r0", "r1"}));  // the join timeout passed
  s.heartbeats["r1"] = -5;  // r1's heartbeat is stale: r0 alone is not more than half of {r0, r2}
  EXPECT_FALSE(quorum_compute(1.2, s, o).members);
}

TEST(Quorum, MinReplicasAndTheFirstQuorumWait) {
  LighthouseOptions o;
  o.min_replicas = 2;
  EXPECT_FALSE(quorum_compute(0.1, asking({{"r0", 0}}), o).members);
  o.min_replicas = 1, o.first = 2;
  EXPECT_FALSE(quorum_compute(0.1, asking({{"r0", 0}}), o).members);
  EXPECT_FALSE(quorum_compute(5, [] { auto s = asking({{"r0", 0}}); s.heartbeats["r0"] = 4.9; return s; }(), o).members);
  EXPECT_EQ(ids(quorum_compute(0.1, asking({{"r0", 0}, {"r1", 0}}), o)), (std::vector<std::string>{"r0", "r1"}));
}

TEST(Quorum, FastPathWhenTheLastMembersAskAgainAndNewIdOnlyOnAChangeOrAFailure) {
  LighthouseState s = asking({{"r0", 3}, {"r1", 3}});
  const Quorum first = issue(s, *quorum_compute(0, s, {}).members);
  EXPECT_EQ(first.id, 1);
  EXPECT_TRUE(s.asked.empty());
  for (const auto& [id, step] : std::vector<std::pair<std::string, int64_t>>{{"r0", 4}, {"r1", 4}})
    s.asked[id] = {Member{id, step, "pid", 0}, 0.2}, s.heartbeats[id] = 0.2;
  s.heartbeats["r2"] = 0.2;  // alive, not asking: the fast path does not wait for it
  const Decision fast = quorum_compute(0.2, s, {});
  ASSERT_TRUE(fast.members);
  EXPECT_NE(fast.why.find("fast path"), std::string::npos);
  EXPECT_EQ(issue(s, *fast.members).id, 1);  // the same members: the same group
  s.asked["r0"] = {Member{"r0", 5, "pid", 1}, 0.3}, s.asked["r1"] = {Member{"r1", 5, "pid", 0}, 0.3};
  s.heartbeats["r0"] = s.heartbeats["r1"] = 0.3;
  EXPECT_EQ(issue(s, *quorum_compute(0.3, s, {}).members).id, 2);  // r0's step failed: a new group
}

TEST(Quorum, ReplicasBehindWaitForOneAtTheHighestStep) {
  LighthouseState s = asking({{"r0", 7}});
  issue(s, *quorum_compute(0, s, {}).members);
  s.previous.reset();
  s.asked["r5"] = {Member{"r5", 0, "pid", 0}, 1}, s.heartbeats["r5"] = 1;
  const Decision d = quorum_compute(1, s, {});
  EXPECT_FALSE(d.members);
  EXPECT_NE(d.why.find("no candidate is at step 7"), std::string::npos) << d.why;
}

TEST(Quorum, HealersTakeTheirSourcesInTurn) {
  Quorum q{4, {{"r0", 9, "", 0}, {"r1", 2, "", 0}, {"r2", 9, "", 0}, {"r3", 0, "", 0}, {"r4", 5, "", 0}}};
  EXPECT_EQ(assignment(q, "r1").heal_from, 0);
  EXPECT_EQ(assignment(q, "r3").heal_from, 2);
  EXPECT_EQ(assignment(q, "r4").heal_from, 0);
  EXPECT_EQ(assignment(q, "r0").heal_to, (std::vector<int>{1, 4}));
  EXPECT_EQ(assignment(q, "r2").heal_to, (std::vector<int>{3}));
  EXPECT_FALSE(assignment(q, "r2").heal);
  EXPECT_EQ(assignment(q, "r2").replica_rank, 2);
  EXPECT_EQ(assignment(q, "r2").max_step, 9);
  EXPECT_THROW(assignment(q, "r9"), std::runtime_error);
  EXPECT_EQ(serialize(parse_quorum(serialize(q))), serialize(q));
}

// A replica that made a group ignores SIGPIPE (as 01-07's ranks do, Note [A peer gone mid-write]):
// a replica stopped (SIGSTOP) and let go on after the others had closed the old group's sockets
// wrote to one and died in silence, where it should fail the step and ask for a quorum.
TEST(ReplicaGroup, ARankThatMadeAGroupSurvivesAWriteToAPeerThatIsGone) {
  std::signal(SIGPIPE, SIG_DFL);
  auto group = new_group(c10::make_intrusive<c10d::HashStore>(), 0, 1, "127.0.0.1", 1.0);
  EXPECT_EQ(ddp_test::write_to_a_gone_peer(), EPIPE);  // without the ignore, SIGPIPE ends this process here
}
