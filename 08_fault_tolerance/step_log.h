// defines: StepLog, a replica's record of every step it committed: who contributed, which samples.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ch08 {

// Note [The step log is the schedule]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// One line per committed step, written before the next step starts (a killed replica leaves its
// last whole line):
//   step 7 position 112 batch 8 contributors r0,r2 quorum 3 average gradients
// Contributor j took samples [position + j*batch, position + (j+1)*batch) of the stream (with
// "ranks G" at the end, a replica group of G ranks: its rank k took [position + (j*G + k)*batch,
// position + (j*G + k + 1)*batch), and the step G times as many samples), so the
// lines are the run's membership schedule and its sample log at once: every replica that
// committed step 7 wrote the same line, the samples of consecutive steps follow each other
// without a gap or an overlap, and a single process that replays the lines must end with the
// replicas' parameters. `average` is gradients (every step), or under local SGD parameters (a
// sync step), failed (a sync that failed) or none (Note [Local SGD]), under DiLoCo
// pseudo-gradients (a sync step), discarded (a sync that failed: Note [DiLoCo]) or none. Also written: "healed from <id> step <k>" by a replica
// that healed, "fault ... at <t>" by one about to be killed, "failed <t>" and "recovered ..." with
// the times of a recovery, "final <fingerprint>".
class StepLog {
 public:
  // Creates <folder>/steps.<replica_id>.txt; UsageError (exit 2) if the id already ran in this run.
  StepLog(const std::string& folder, const std::string& replica_id);
  ~StepLog();
  void line(const std::string& text);
  // A replica group's other ranks share the leader's log (Note [A replica group of several ranks]):
  // from follow() on, this one writes only its fault lines.
  void follow() { follower_ = true; }
  // Says, and writes, how long the recovery that committed `step` took, and its parts: the times
  // of the failure, the quorum, the new group, the healing and the step's end.
  void recovered(int64_t step, const std::vector<double>& at);

 private:
  int fd_ = -1;
  bool follower_ = false;
};

struct StepRecord {
  int64_t step = 0, position = 0, batch = 0, quorum = 0;
  std::vector<std::string> contributors;
  std::string average = "gradients";  // gradients, parameters or failed (local SGD), pseudo-gradients or discarded (DiLoCo), none
  int64_t ranks = 1;  // per contributor (--ranks-per-replica): written only when more than 1
};
std::string format_step(const StepRecord& r);
// Parses a "step ..." line; false if the line is another kind.
bool parse_step(const std::string& line, StepRecord& r);

}  // namespace ch08
