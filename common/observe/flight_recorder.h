// defines: FlightRecorder (a rank's last collectives, shared through the store, and the diagnosis
// the survivors print when a collective fails), and issue()/wait(), which record and trace.
#pragma once
#include <torch/torch.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "common/group/compat.h"
#include "common/group/process_group.h"

namespace ddp {

// Note [Flight recorder]
// When a collective fails, the error only says what this rank saw: "Timed out waiting 5000ms",
// "Connection closed by peer". The question is which rank is to blame and where it stands.
// So every rank records its collectives as it starts them: a sequence number (the n-th
// collective of this group, the same n on every rank for the same call), the kind, a tag
// (bucket0, stop-flag), the size, the training step and its place among the step's
// collectives; then whether it completed. A background thread publishes the newest records
// to the store (key ddp_flight/<rank>) when they change, at most every 100 ms, and every
// 250 ms regardless (a heartbeat); the collectives themselves never wait for the store. When a
// collective fails, the rank reads every rank's records and compares:
//   - gone: the process no longer exists (same host: /proc), said it exited, or (another
//     host) has not published for 2 s;
//   - skipped: at the same sequence number two ranks recorded different collectives; the one
//     whose collective comes later in the program skipped one (a later step; within a step,
//     the order in which the two collectives ran in the steps before);
//   - behind: it has not started the collective this rank waits in (a straggler, or a rank
//     stuck elsewhere).
// PyTorch's NCCL backend keeps the same kind of record (TORCH_NCCL_TRACE_BUFFER_SIZE) and its
// analyzer draws the same conclusions from the dumps of all ranks.

struct CollectiveRecord {
  int64_t seq = 0;
  std::string kind, tag;  // "all-reduce", "bucket0"
  int64_t bytes = 0;
  int64_t step = -1;  // -1: before the first step
  int site = 0;       // its place among the collectives of its step
  char state = 'I';   // I: in flight, C: completed, F: failed
  double issued_us = 0, done_us = 0;
};

// "#12 all-reduce bucket0 (1.0 MiB, step 5)"
std::string describe(const CollectiveRecord& r);

class FlightRecorder {
 public:
  explicit FlightRecorder(Group& group, size_t keep = 32);
  ~FlightRecorder();  // publishes a last time, marked "exited"
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  void set_step(int64_t step);
  int64_t record(const std::string& kind, const std::string& tag, int64_t bytes);
  void completed(int64_t seq, double t_us);
  void failed(int64_t seq);
  // The diagnosis of the failure of collective `seq`, one finding per line. Waits a moment
  // first, so that the other ranks' newest records have reached the store.
  std::vector<std::string> diagnose(int64_t seq);

  struct State;

 private:
  static void on_terminate();  // Note [When the backend aborts]
  std::shared_ptr<State> s_;
};

// A collective started through issue(): what wait() and the trace need.
struct Pending {
  int64_t seq = -1;  // -1: the group has no flight recorder
  c10::intrusive_ptr<c10d::Work> work;
  std::string name;
  double issued_us = 0;
  std::shared_ptr<std::atomic<double>> done_us;  // when the backend finished it; 0 until then
};

// Starts `start()` (a collective of `g`): records it in g.recorder (if any) and, with --trace,
// draws it on the collectives track from now until the backend finishes it.
Pending issue(Group& g, const std::string& kind, const std::string& tag, int64_t bytes,
              const std::function<c10::intrusive_ptr<c10d::Work>()>& start);
// Waits for it. On failure: logs the flight recorder's diagnosis and throws it with the error.
void wait(Group& g, Pending& p);
// Both: a blocking collective.
inline void run(Group& g, const std::string& kind, const std::string& tag, int64_t bytes,
                const std::function<c10::intrusive_ptr<c10d::Work>()>& start) {
  Pending p = issue(g, kind, tag, bytes, start);
  wait(g, p);
}

// For chapters 03-04, which call the backend themselves: with --trace, draws `work` on the
// collectives track from now until it ends. Returns it: group.pg->allreduce(t) becomes
// traced(group.pg->allreduce(t), "all-reduce", bytes).
c10::intrusive_ptr<c10d::Work> traced(c10::intrusive_ptr<c10d::Work> work, const std::string& name, int64_t bytes);

// Thrown by wait(): the backend's error and the diagnosis.
struct CollectiveError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace ddp
