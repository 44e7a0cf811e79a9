// provides: serve_lighthouse(), the lighthouse as a program of its own (--lighthouse-only).
#include <signal.h>

#include <thread>

#include "08_fault_tolerance/launch.h"
#include "08_fault_tolerance/lighthouse.h"
#include "common/basics/log.h"
#include "common/launch/error_file.h"

namespace ch08 {
namespace {
volatile sig_atomic_t stop_asked = 0;
}

int serve_lighthouse(const Options& o) {
  ddp::set_log_identity("lighthouse");
  signal(SIGINT, [](int) { stop_asked = 1; });
  signal(SIGTERM, [](int) { stop_asked = 1; });
  auto store = host_lighthouse_store("127.0.0.1", o.port);
  Lighthouse lighthouse(store, o.run, o.quorum);
  ddp::log("serving run '" + o.run + "' on 0.0.0.0:" + std::to_string(o.port) + " (every address of this host; min replicas " +
           std::to_string(o.quorum.min_replicas) + ", join timeout " + ddp::seconds(o.quorum.join_timeout_s) +
           ", heartbeat timeout " + ddp::seconds(o.quorum.heartbeat_timeout_s) + ")");
  const double start = ddp::monotonic_seconds();
  double idle_since = start;  // --until-done: since when no replica has been connected
  while (!stop_asked && (o.serve_for_s == 0 || ddp::monotonic_seconds() - start < o.serve_for_s)) {
    const double now = ddp::monotonic_seconds();
    const std::string line = lighthouse.tick(now);
    if (!line.empty()) ddp::log(line);
    if (o.until_done && !lighthouse.idle()) idle_since = -1;
    if (o.until_done && lighthouse.idle()) {  // a batch script waits for this (replicas.sbatch)
      if (lighthouse.ended()) return ddp::log("the run ended and every replica has gone: stopped"), 0;
      if (idle_since < 0) idle_since = now;
      if (now - idle_since > o.quorum_deadline_s) {
        ddp::log("no replica for " + ddp::seconds(o.quorum_deadline_s) + " (--quorum-deadline), and the run has not ended: stopped");
        return 1;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // a tick every 2 ms: a step waits about half of it
  }
  ddp::log("stopped");
  return 0;
}

}  // namespace ch08
