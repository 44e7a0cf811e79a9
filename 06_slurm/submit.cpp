// provides: submit() and follow(): 06_slurm --submit --follow, through sbatch and scontrol.
#include "06_slurm/submit.h"

#include <chrono>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "common/basics/errors.h"
#include "common/basics/log.h"
#include "common/launch/command.h"
#include "common/launch/error_file.h"  // monotonic_seconds

namespace ddp {

// Note [Submitting and following a job]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// `sbatch --parsable` answers "<job id>" or "<job id>;<cluster>", nothing else, so the id is
// read without guessing. Following a job is polling: once a second `scontrol show job -o <id>`
// gives the job's record on one line (JobState=, Restarts=, Reason=, NodeList=, ExitCode=), and
// rank 0's log (<out-dir>/<job id>/rank0.log, written by the trainer) is printed as it grows.
// A job has ended when its state is none of the live ones (PENDING, RUNNING, CONFIGURING,
// COMPLETING, REQUEUED, REQUEUE_FED, SUSPENDED, RESIZING): a requeue passes through REQUEUED and
// PENDING and is followed to its next run. A job killed at its limit is told whether a warning
// signal had been asked for, since without one it could not checkpoint before it was killed.
// slurmctld under load answers late, and its clients then fail with "Socket timed out on
// send/recv operation" (its MessageTimeout): a poll that fails is asked again each second, and
// only one that keeps failing for --timeout seconds ends the follow (exit 1, Slurm's words).
namespace {

// One field of `scontrol show job -o <id>` ("JobState=RUNNING ..."), or "" if absent.
std::string field(const std::string& record, const std::string& key) {
  const size_t at = record.find(" " + key + "=");
  if (at == std::string::npos) return "";
  const size_t from = at + key.size() + 2;
  return record.substr(from, record.find(' ', from) - from);
}

// "30 s", "2.5 s".
std::string in_seconds(double s) {
  std::ostringstream o;
  o << s << " s";
  return o.str();
}

}  // namespace

std::string submit(const std::string& script_path, double timeout_s) {
  const ddp::CommandResult r = ddp::run_command({"sbatch", "--parsable", script_path}, timeout_s);
  if (!r.started) throw ddp::UsageError("sbatch is not on PATH: no Slurm here; try --local");
  if (r.exit_code != 0) throw ddp::SlurmError("sbatch " + script_path + " failed: " + r.output);
  const std::string id = r.output.substr(0, r.output.find_first_of(";\n"));
  if (id.empty() || id.find_first_not_of("0123456789") != std::string::npos) {
    throw std::runtime_error("sbatch answered '" + r.output + "', not a job id");
  }
  return id;
}

int follow(const ddp::JobSpec& j, const std::string& id, double timeout_s) {
  const std::string rank0_log = j.out_dir + "/" + id + "/rank0.log";
  std::streamoff printed = 0;
  std::string last_state;
  double failing_since = -1;  // when the polls began to fail, or -1
  auto print_new_lines = [&] {
    std::ifstream in(rank0_log);
    in.seekg(printed);
    for (std::string l; std::getline(in, l) && !in.eof();) std::cout << l << "\n", printed = in.tellg();
    std::cout.flush();
  };
  for (;;) {
    const ddp::CommandResult r = ddp::run_command({"scontrol", "show", "job", "-o", id}, timeout_s);
    if (r.exit_code != 0) {
      const double now = ddp::monotonic_seconds();
      const std::string said = r.output.substr(0, r.output.find_last_not_of("\n") + 1);
      if (failing_since < 0) {
        failing_since = now;
        ddp::log("scontrol show job " + id + " failed (" + said + "); asking again each second for up to " + in_seconds(timeout_s));
      }
      if (now - failing_since >= timeout_s) {
        throw ddp::SlurmError("scontrol show job " + id + " failed for " + in_seconds(timeout_s) + " (--timeout): " + said);
      }
      std::this_thread::sleep_for(std::chrono::seconds(1));
      continue;
    }
    if (failing_since >= 0) ddp::log("scontrol show job " + id + " answered again");
    failing_since = -1;
    const std::string rec = " " + r.output, state = field(rec, "JobState"), restarts = field(rec, "Restarts");
    print_new_lines();
    if (state + restarts != last_state) {
      ddp::log("job " + id + ": " + state + " (reason " + field(rec, "Reason") + ", restarts " + restarts + ", nodes " +
               field(rec, "NodeList") + ")");
      last_state = state + restarts;
    }
    const bool ended = state != "PENDING" && state != "RUNNING" && state != "CONFIGURING" && state != "COMPLETING" &&
                       state != "REQUEUED" && state != "REQUEUE_FED" && state != "SUSPENDED" && state != "RESIZING";
    if (!ended) {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      continue;
    }
    print_new_lines();
    const std::string summary = "job " + id + " ended: " + state + " (exit " + field(rec, "ExitCode") + ", restarts " + restarts +
                                "); its log: " + j.out_dir + "/" + j.name + "-" + id + ".out";
    if (state == "COMPLETED") return ddp::log(summary), ddp::kExitOk;
    if (state == "TIMEOUT") {
      ddp::log_error(summary + ": it hit its time limit (" + j.time + ") and was killed, SIGTERM then SIGKILL" +
                     (j.no_signal ? "; no warning signal was requested, so it could not checkpoint first: add --signal USR2@90"
                                  : "; the warning signal came too late for a checkpoint, or was not handled"));
    } else {
      ddp::log_error(summary);
    }
    return ddp::kExitFailure;
  }
}

}  // namespace ddp
