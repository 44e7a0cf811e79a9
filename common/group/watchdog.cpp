// provides: the Watchdog that turns a silent hang into an error message and exit code 1.
#include "common/group/watchdog.h"

#include <unistd.h>

#include "common/basics/errors.h"
#include "common/basics/log.h"

namespace ddp {

Watchdog::Watchdog(std::chrono::milliseconds limit, std::string doing) : doing_(std::move(doing)) {
  thread_ = std::thread([this, limit] {
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_for(lock, limit, [this] { return done_; })) return;
    log_error("stuck for " + seconds(limit.count() / 1000.0) + " while " + doing_ + "; giving up");
    ::_exit(kExitFailure);  // not exit(): other threads may hold locks that destructors need
  });
}

void Watchdog::disarm() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::doing(std::string what) {
  std::lock_guard<std::mutex> lock(mu_);
  doing_ = std::move(what);
}

}  // namespace ddp
