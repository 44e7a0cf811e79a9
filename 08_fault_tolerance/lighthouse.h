// defines: the lighthouse (a quorum per step, served on a c10d TCPStore) and a replica's client of it.
#pragma once
#include <torch/torch.h>

#include <atomic>
#include <map>
#include <set>
#include <mutex>
#include <thread>

#include "08_fault_tolerance/quorum.h"
#include "common/group/compat.h"

namespace ch08 {

// Note [The lighthouse on a store]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// torchft's lighthouse is a gRPC server in Rust. Ours is a TCPStore that the lighthouse process
// hosts, and a loop that reads it every 2 ms (torchft's computes a quorum as each request comes,
// and every 100 ms besides): the store's keys are all the exchange needs.
//   run              the run's name; a replica of another run is refused (exit 2)
//   epoch            when this lighthouse started: a lighthouse started again is a new epoch
//   joins, join/<n>  replica n's id, in the order they joined
//   beat_port        the port of the lighthouse's heartbeat listener. Each replica holds one
//                    connection to it, says its id, then writes a byte every 100 ms; the
//                    lighthouse notes, on its own clock, when bytes last came (no clocks are
//                    compared across hosts)
//   ask/<id>         "seq step failures address": the replica's question for its next step
//   answer/<id>/<seq> the quorum, as serialize() writes it, for everyone who asked
//   ended            the last step, once a replica has committed it: a late replacement stops
//   group/<epoch>/<quorum id>/...  the keys of that quorum's Gloo group: every quorum meets on a
//                    fresh prefix, so no key of a broken group is read by the next one
// A replica that asked waits for its answer key.
// Two ways to be lost. Silence: a stopped process (SIGSTOP), a machine gone, writes nothing, and
// its connection looks open; it is lost once the heartbeat timeout passes (torchft's only way).
// A closed connection: a process that dies, even by SIGKILL, has its sockets closed by its kernel,
// and the lighthouse reads the end at once; it is lost from that tick on, no timeout waited.
class Lighthouse {
 public:
  Lighthouse(c10::intrusive_ptr<c10d::Store> store, std::string run, LighthouseOptions opts);
  // Reads heartbeats and asks, answers when quorum_compute() allows. Returns the line to log
  // when something changed (a quorum issued, or the reason it waits changed), else "".
  std::string tick(double now);
  std::string epoch() const { return epoch_; }
  // No replica's heartbeat connection is open; a replica has said the run ended.
  bool idle() const { return beats_.empty(); }
  bool ended() const { return store_->check({"ended"}); }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
  LighthouseOptions opts_;
  LighthouseState state_;
  std::string epoch_, why_, said_;
  double why_since_ = 0;
  int64_t joins_seen_ = 0;
  std::vector<std::string> ids_;
  std::map<std::string, int64_t> answered_seq_, pending_seq_;
  struct Beat {
    std::string id, buffer;  // the id, once its line has come
  };
  int listen_fd_ = -1;
  std::map<int, Beat> beats_;  // by socket
  std::set<std::string> closed_;  // ids whose connection closed: lost until they connect again
  void read_heartbeats(double now);

 public:
  ~Lighthouse();
};

// Thrown by ask() when the run has ended (a replica committed its last step) at a step beyond
// the asker's: a replacement that came too late has nothing left to join.
struct RunEnded : std::runtime_error {
  RunEnded(int64_t at) : std::runtime_error("the run ended"), step(at) {}
  int64_t step;
};

// A replica's side: joins, heartbeats from a thread of its own (over its own connection, so a
// replica waiting for an answer still beats), asks.
class LighthouseClient {
 public:
  // Connects to the lighthouse at host:port; throws UsageError if it serves another run.
  // `member` false: a replica group's other ranks (Note [A replica group of several ranks]): they
  // neither join nor beat, and reach the lighthouse only for their groups' stores.
  LighthouseClient(std::string host, int port, std::string run, std::string replica_id, std::string address,
                   double connect_timeout_s, bool member = true);
  ~LighthouseClient();
  // Asks for the quorum of the next step. If the lighthouse does not answer, says so, waits and
  // connects again (a lighthouse started again), for up to `deadline_s`; then throws.
  Quorum ask(int64_t step, int64_t failures, double deadline_s);
  // Says the run has ended at `step` (the replica that committed the last step).
  void finished(int64_t step);
  // The quorum's group: its name ("<epoch>/<quorum id>": a lighthouse started again counts from 1
  // again, in a new epoch), and the store it meets on, under that name.
  std::string group_name(const Quorum& q) const { return epoch_ + "/" + std::to_string(q.id); }
  // `lane` k: the group of local rank k of every member (Note [A replica group of several ranks]).
  c10::intrusive_ptr<c10d::Store> group_store(const Quorum& q, int lane);
  const std::string& epoch() const { return epoch_; }
  // A rank that is not the leader: connects again if the leader's answer came from another epoch.
  void follow(const std::string& epoch);

 private:
  void connect();
  void beat_loop();
  std::string host_, run_, id_, address_;
  int port_;
  double connect_timeout_s_;
  bool member_;
  std::mutex mu_;  // guards ask_store_/beat_port_ against the heartbeat thread
  c10::intrusive_ptr<c10d::Store> ask_store_;
  int beat_port_ = 0;
  std::string epoch_;
  int64_t seq_ = 0;
  std::atomic<bool> stop_{false};
  std::thread beats_;
};

// The lighthouse's TCPStore, hosted here (exit 2 if the port is taken).
c10::intrusive_ptr<c10d::TCPStore> host_lighthouse_store(const std::string& host, int port);

}  // namespace ch08
