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
  while (!stop_asked && (o.serve_for_s == 0 || ddp::monotonic_seconds() - start < o.serve_for_s)) {
    const std::string line = lighthouse.tick(ddp::monotonic_seconds());
    if (!line.empty()) ddp::log(line);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // a tick every 2 ms: a step waits about half of it
  }
  ddp::log("stopped");
  return 0;
}

}  // namespace ch08
