// defines: the quorum the lighthouse computes at every step, and what each replica reads from it.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ch08 {

// Note [A quorum per step]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// Before every step each replica group asks the lighthouse "who trains this step?" and tells it
// its own step and whether its last step failed. The lighthouse answers everyone who asked with
// the same quorum: the members, sorted by replica id, and an id. The rules are torchft's
// (torchft's src/lighthouse.rs, quorum_compute), in this order:
//  - only a replica whose heartbeat is fresh (within heartbeat_timeout) counts as alive, and only
//    an alive one that asks is a candidate (an ask is a heartbeat too);
//  - fast path: if every member of the last quorum is a candidate again, answer at once, new
//    candidates included;
//  - otherwise wait until at least min_replicas are candidates, more than half of the alive ones
//    are, and either all the alive ones are or join_timeout has passed since the first asked.
// Two rules of ours. The first quorum waits for `first` replicas (the launcher's N): replicas
// start at different times, and a quorum of whoever asked first would train ahead of the others,
// which would then have to heal before they ever trained. And a candidate at the highest step the
// lighthouse has issued must be among them, or it waits: a quorum of replicas that are all
// behind would have nobody to heal from, and would train again from an old step.
// A quorum gets a new id when its members change or a member reports that its last step failed,
// as torchft's lighthouse does (it counts commit failures too). A new id means a new process
// group on a fresh store prefix: Gloo has no abort (no way to cancel a collective that waits for
// a lost peer, or to mend a group whose collective failed), so the old group is dropped.
struct Member {
  std::string replica_id;
  int64_t step = 0;          // steps it has committed
  std::string address;       // host:port of the store it hosts (a quorum's group meets on rank 0's)
  int64_t commit_failures = 0;
};

struct Quorum {
  int64_t id = 0;
  std::vector<Member> members;  // sorted by replica_id
};

struct LighthouseOptions {
  int min_replicas = 1;
  int first = 0;  // the first quorum waits for this many: all start together
  double join_timeout_s = 2.0;  // longer than the heartbeat's: a lost member is dropped first
  double heartbeat_timeout_s = 1.0;
};

struct LighthouseState {
  std::map<std::string, std::pair<Member, double>> asked;  // replica id -> (its ask, when it first asked)
  std::map<std::string, double> heartbeats;                // replica id -> when its heartbeat last moved
  std::optional<Quorum> previous;
  int64_t quorum_id = 0;
  int64_t max_step = 0;  // the highest step of any quorum issued
};

struct Decision {
  std::optional<std::vector<Member>> members;  // set when a quorum can be issued now
  std::string why;                             // why (not): for the lighthouse's log
};

// The rules above, at time `now` (seconds, the lighthouse's clock).
Decision quorum_compute(double now, const LighthouseState& s, const LighthouseOptions& o);

// Issues the quorum: a new id if the members changed or one reported a failure; forgets the asks.
Quorum issue(LighthouseState& s, std::vector<Member> members);

// What one replica reads from a quorum.
struct Assignment {
  int replica_rank = -1, replica_world = 0;  // its rank in the quorum's process group
  int64_t max_step = 0;                      // the step the quorum trains from
  bool heal = false;                         // behind max_step: copy the state of heal_from first
  int heal_from = -1;                        // the rank it heals from
  std::vector<int> heal_to;                  // the ranks that heal from this one
};
// Healers take their sources in turn among the members at max_step (the k-th healer from the
// k-th source, wrapping), so one donor does not serve them all. Throws if `replica_id` is absent.
Assignment assignment(const Quorum& q, const std::string& replica_id);

// One line per quorum, for the store and the log: "id;r1,step,address,failures;r2,...".
std::string serialize(const Quorum& q);
Quorum parse_quorum(const std::string& text);

}  // namespace ch08
