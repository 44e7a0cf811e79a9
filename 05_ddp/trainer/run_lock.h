// defines: claim_run_folder() and RunLock: one live run per --out folder, a dead run's folder
// taken over (Note [One run per folder]).
#pragma once
#include <torch/torch.h>

#include <string>

#include "common/group/process_group.h"

namespace ddp {

// Rank 0's hold on <folder>/run.lock, for the life of the run (the other ranks hold nothing).
// Ending the run releases it and clears the record, so that a record found later means a run
// that died without ending.
class RunLock {
 public:
  RunLock() = default;
  RunLock(RunLock&& other) noexcept;
  RunLock& operator=(RunLock&& other) noexcept;
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;
  ~RunLock();

  // "" or the line that says whose dead run's folder this run took over: RunOutput logs it once
  // the rank's log file is open.
  std::string took_over;

 private:
  void release();
  friend RunLock claim_run_folder(const std::string& folder, Group& group, const torch::Device& device);
  int fd_ = -1;
};

// Rank 0 creates `folder` and claims it before anything in it is opened; every rank learns the
// verdict from rank 0 (one broadcast over `group`, on `device`). A folder a live run holds is
// refused on every rank with UsageError (exit 2), naming that run's host and pid, and nothing in
// it is changed; the folder of a run that died is taken over.
RunLock claim_run_folder(const std::string& folder, Group& group, const torch::Device& device);

}  // namespace ddp
