// defines: chapter 08's flags, for its three roles: replica (the lesson), lighthouse, launcher.
#pragma once
#include <string>
#include <vector>

#include "08_fault_tolerance/local_sgd.h"
#include "08_fault_tolerance/quorum.h"
#include "common/data/toy_task.h"

namespace ch08 {

struct Options {
  ddp::toy::TrainFlags train;   // --steps --lr --batch --seed ... (chapters 03-04's)
  // a replica
  std::string replica_id;       // --replica-id
  std::string lighthouse = "127.0.0.1:29510";  // --lighthouse host:port
  std::string run = "08";       // --run: the lighthouse serves one run
  std::string out;              // --out: the run's folder (default runs/08_fault_tolerance/<run>)
  bool out_given = false;
  bool reset = false;           // --reset: the launcher removes an earlier run's step logs from --out
  int ranks_per_replica = 1;   // --ranks-per-replica G: each replica group G ranks (05's DDP inside)
  int contributors = 0;         // --contributors K: at most K members contribute (0: all)
  double timeout_s = 2;         // --timeout: how long a collective waits for a silent peer
  double quorum_deadline_s = 30;  // --quorum-deadline
  int sync_every = 0;           // --sync-every H: local SGD, the parameters averaged every H steps
  Outer outer;                  // --outer-lr --outer-momentum: with --sync-every, DiLoCo (lr 0: local SGD)
  double step_ms = 0;           // --step-ms: compute time added to each step (a bigger model's)
  std::string fault;            // --fault WHERE@STEP: this replica's own fault (for the lesson's demos)
  // the lighthouse
  bool serve = false;           // --lighthouse-only: be the lighthouse
  int port = 29510;
  LighthouseOptions quorum;     // --min-replicas --join-timeout --heartbeat-timeout
  double serve_for_s = 0;       // --serve-for: stop after this long (0: until a signal)
  bool until_done = false;      // --until-done: stop once the run ended and every replica has gone
  // a finished run
  bool check_only = false;      // --check: the launcher's checks on --out, for a run started by hand
  // the launcher
  int replicas = 0;             // --replicas N: start a lighthouse and N replicas here
  std::vector<std::string> faults;  // --inject ID:WHERE@STEP
  double replace_after_s = -1;  // --replace-after S: start a new replica S seconds after one is lost
  std::string link;             // --link RATE: each replica a host of its own on a link of that rate (02's, root)
  double lighthouse_down_s = 0; // --lighthouse-down K:S: kill the lighthouse once step K is committed,
  int64_t lighthouse_down_step = 0;  // start it again S seconds later (K here)
};

// Parses argv into `o` (exit 2 on a bad flag, with why).
void parse_options(int argc, char** argv, Options& o);

// "host:port" -> both; UsageError (exit 2) if it is not that.
std::pair<std::string, int> split_address(const std::string& address, const std::string& flag);

// --fault WHERE@STEP, parsed: where in {quorum, forward, allreduce, vote, stop}; none when empty.
class StepLog;
struct Fault {
  std::string where;
  int64_t step = -1;
  StepLog* log = nullptr;  // where the time of the fault is written, for the launcher's report
  // At `where` in step `step` (quorum, forward, allreduce, vote): SIGKILL this process (stop: SIGSTOP
  // in forward), as a real fault would.
  void at(const std::string& point, int64_t step_now) const;
};
Fault parse_fault(const std::string& text, const std::string& flag);

}  // namespace ch08
