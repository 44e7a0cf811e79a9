// provides: the flight recorder, its publisher thread, the diagnosis, and issue()/wait().
#include "common/observe/flight_recorder.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "common/launch/error_file.h"
#include "common/basics/failure.h"
#include "common/basics/log.h"
#include "common/launch/net.h"
#include "common/observe/trace.h"

namespace ddp {

namespace {
constexpr auto kPublishEvery = std::chrono::milliseconds(250);  // heartbeat
constexpr auto kPublishGap = std::chrono::milliseconds(100);    // at most this often on changes
constexpr double kSilentGoneS = 2.0;  // another host's rank that has not published for this long is gone
constexpr auto kSettle = std::chrono::milliseconds(400);  // > 1 heartbeat: the peers' newest records are in

std::string no_spaces(std::string s) {
  std::replace(s.begin(), s.end(), ' ', '_');
  return s.empty() ? "-" : s;
}

std::string human_bytes(int64_t b) {
  char buf[32];
  if (b >= 1 << 20) std::snprintf(buf, sizeof(buf), "%.2f MiB", b / 1048576.0);
  else if (b >= 1 << 10) std::snprintf(buf, sizeof(buf), "%.2f KiB", b / 1024.0);
  else std::snprintf(buf, sizeof(buf), "%lld B", static_cast<long long>(b));
  return buf;
}

// What one rank published.
struct Published {
  std::string host;
  long pid = 0;
  double heartbeat_us = 0;
  int exited = 0;  // 1: its program ended; 2: it aborted
  int64_t last_seq = 0;  // 0: none yet
  std::map<int64_t, CollectiveRecord> records;
};

bool parse(const std::string& text, Published& p) {
  std::istringstream in(text);
  if (!(in >> p.host >> p.pid >> p.heartbeat_us >> p.exited >> p.last_seq)) return false;
  CollectiveRecord r;
  while (in >> r.seq >> r.kind >> r.tag >> r.bytes >> r.step >> r.site >> r.state >> r.issued_us >> r.done_us) p.records[r.seq] = r;
  return true;
}

// Same host only: whether the process `pid` still runs (a zombie has ended: it waits to be reaped).
bool process_ended(long pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const auto close = line.rfind(')');
  return close == std::string::npos || close + 2 >= line.size() || line[close + 2] == 'Z' || line[close + 2] == 'X';
}

bool same_collective(const CollectiveRecord& a, const CollectiveRecord& b) {
  return a.kind == b.kind && a.tag == b.tag && a.bytes == b.bytes && a.step == b.step;
}

// Whether `a` comes before `b` in the program: +1 if b is later, -1 if earlier, 0 unknown.
// A later step is later; within one step, the order in which the two tags were run in an
// earlier step of either rank's history (a skipped collective shifts the sequence numbers,
// not the program's order).
int program_order(const CollectiveRecord& a, const CollectiveRecord& b,
                  const std::vector<const std::map<int64_t, CollectiveRecord>*>& histories) {
  if (a.step != b.step) return a.step < b.step ? 1 : -1;
  for (const auto* h : histories) {
    std::map<int64_t, std::pair<int, int>> at;  // step -> site of a's tag, site of b's tag
    for (const auto& [n, r] : *h) {
      if (r.step == a.step || r.step < 0) continue;
      auto& sites = at.try_emplace(r.step, std::make_pair(-1, -1)).first->second;
      if (r.tag == a.tag && r.kind == a.kind) sites.first = r.site;
      if (r.tag == b.tag && r.kind == b.kind) sites.second = r.site;
    }
    for (auto it = at.rbegin(); it != at.rend(); ++it) {
      if (it->second.first >= 0 && it->second.second >= 0) return it->second.first < it->second.second ? 1 : -1;
    }
  }
  return 0;
}

std::string ago(double us_then) { return seconds((wall_us() - us_then) / 1e6) + " ago"; }

// "all-reduce bucket0 (1.0 MiB, step 5)": what the collective was, without its number.
std::string what_ran(const CollectiveRecord& r) {
  return r.kind + " " + r.tag + " (" + human_bytes(r.bytes) +
         (r.step >= 0 ? ", step " + std::to_string(r.step) + ")" : ", before the first step)");
}
}  // namespace

std::string describe(const CollectiveRecord& r) { return "#" + std::to_string(r.seq) + " " + what_ran(r); }

struct FlightRecorder::State {
  Group* group = nullptr;
  size_t keep = 32;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<CollectiveRecord> records;
  int64_t next_seq = 1, step = -1;
  int site = 0;
  bool changed = true, stop = false, store_broken = false;
  std::thread publisher;

  std::string snapshot(int exited) {  // with mu held; exited: 0 running, 1 ended, 2 aborted
    std::ostringstream out;
    out.precision(17);
    out << no_spaces(hostname()) << " " << ::getpid() << " " << wall_us() << " " << exited << " " << next_seq - 1 << "\n";
    for (const auto& r : records) {
      out << r.seq << " " << r.kind << " " << r.tag << " " << r.bytes << " " << r.step << " " << r.site << " " << r.state
          << " " << r.issued_us << " " << r.done_us << "\n";
    }
    return out.str();
  }
  void publish(const std::string& text) {
    if (store_broken) return;
    try {
      group->store->set("ddp_flight/" + std::to_string(group->rank()), std::vector<uint8_t>(text.begin(), text.end()));
    } catch (const std::exception&) {
      store_broken = true;  // the store's host is gone; the diagnosis will say so
    }
  }
  void loop() {
    std::unique_lock<std::mutex> lock(mu);
    while (!stop) {
      cv.wait_for(lock, kPublishEvery, [&] { return stop || changed; });
      if (stop) break;
      changed = false;
      std::string text = snapshot(0);
      lock.unlock();
      publish(text);
      std::this_thread::sleep_for(kPublishGap);
      lock.lock();
    }
  }
  CollectiveRecord* find(int64_t seq) {
    for (auto& r : records) {
      if (r.seq == seq) return &r;
    }
    return nullptr;
  }
};

// Note [When the backend aborts]
// Gloo does not always fail a collective with an error: a message larger than the buffer the
// receiving rank posted (two ranks running different collectives, one of them skipped) ends
// in GLOO_ENFORCE on the backend's thread, an uncaught exception, std::terminate(), abort().
// No wait() ever returns. So the recorder also installs a terminate handler: it says what the
// backend threw, runs the diagnosis with the collective in flight, leaves it in the error file
// for the launcher, publishes a last "exited" record for the other ranks, then aborts as before.
namespace {
FlightRecorder* g_terminating = nullptr;
std::terminate_handler g_previous_terminate = nullptr;

// Logs the diagnosis of collective `seq`, a line per finding; returns the findings about the
// other ranks, joined, for the error (this rank's own history stays in its log).
std::string log_diagnosis(FlightRecorder& rec, int64_t seq) {
  std::string findings;
  for (const std::string& line : rec.diagnose(seq)) {
    log("flight recorder: " + line);
    if (line.rfind("this rank's last", 0) != 0) findings += (findings.empty() ? "" : "; ") + line;
  }
  return findings;
}
}  // namespace

void FlightRecorder::on_terminate() {
  static std::atomic<bool> once{false};
  FlightRecorder* rec = g_terminating;
  if (rec && !once.exchange(true)) {
    std::string what = "no exception";
    try {
      if (auto e = std::current_exception()) std::rethrow_exception(e);
    } catch (const std::exception& e) {
      what = short_what(e);
    } catch (...) {
      what = "an unknown exception";
    }
    int64_t in_flight = -1;
    {
      std::lock_guard<std::mutex> lock(rec->s_->mu);
      for (const auto& r : rec->s_->records) {
        if (r.state == 'I' && in_flight < 0) in_flight = r.seq;  // the oldest: the one the others may wait in
      }
    }
    log("flight recorder: the backend aborted this process: " + what);
    const std::string findings = in_flight > 0 ? log_diagnosis(*rec, in_flight) : "";
    write_error_file("the backend aborted: " + what + (findings.empty() ? "" : " [flight recorder: " + findings + "]"));
    std::string text;
    {
      std::lock_guard<std::mutex> lock(rec->s_->mu);
      text = rec->s_->snapshot(2);
    }
    rec->s_->publish(text);
  }
  if (g_previous_terminate) g_previous_terminate();
  std::abort();
}

FlightRecorder::FlightRecorder(Group& group, size_t keep) : s_(std::make_shared<State>()) {
  s_->group = &group;
  s_->keep = keep;
  group.recorder = this;
  s_->publish(s_->snapshot(0));  // at once: a rank killed before its first collective is then "gone", not unknown
  s_->changed = false;
  s_->publisher = std::thread([s = s_] { s->loop(); });
  g_terminating = this;
  g_previous_terminate = std::set_terminate(&FlightRecorder::on_terminate);
}

FlightRecorder::~FlightRecorder() {
  if (g_terminating == this) std::set_terminate(g_previous_terminate), g_terminating = nullptr;
  {
    std::lock_guard<std::mutex> lock(s_->mu);
    s_->stop = true;
  }
  s_->cv.notify_all();
  s_->publisher.join();
  std::string text;
  {
    std::lock_guard<std::mutex> lock(s_->mu);
    text = s_->snapshot(1);
  }
  s_->publish(text);
  if (s_->group->recorder == this) s_->group->recorder = nullptr;
}

void FlightRecorder::set_step(int64_t step) {
  std::lock_guard<std::mutex> lock(s_->mu);
  if (step != s_->step) s_->step = step, s_->site = 0;
}

int64_t FlightRecorder::record(const std::string& kind, const std::string& tag, int64_t bytes) {
  std::lock_guard<std::mutex> lock(s_->mu);
  CollectiveRecord r;
  r.seq = s_->next_seq++;
  r.kind = no_spaces(kind);
  r.tag = no_spaces(tag);
  r.bytes = bytes;
  r.step = s_->step;
  r.site = s_->site++;
  r.issued_us = wall_us();
  s_->records.push_back(r);
  if (s_->records.size() > s_->keep) s_->records.pop_front();
  s_->changed = true;
  s_->cv.notify_one();
  return r.seq;
}

void FlightRecorder::completed(int64_t seq, double t_us) {
  std::lock_guard<std::mutex> lock(s_->mu);
  if (CollectiveRecord* r = s_->find(seq); r && r->state == 'I') r->state = 'C', r->done_us = t_us, s_->changed = true;
}

void FlightRecorder::failed(int64_t seq) {
  std::lock_guard<std::mutex> lock(s_->mu);
  if (CollectiveRecord* r = s_->find(seq)) r->state = 'F', r->done_us = wall_us();
  s_->changed = true;
  s_->cv.notify_one();
}

std::vector<std::string> FlightRecorder::diagnose(int64_t seq) {
  std::this_thread::sleep_for(kSettle);
  Group& g = *s_->group;
  const int me = g.rank();
  CollectiveRecord mine;
  std::map<int64_t, CollectiveRecord> own;
  std::vector<std::string> out;
  {
    std::lock_guard<std::mutex> lock(s_->mu);
    if (CollectiveRecord* r = s_->find(seq)) mine = *r;
    for (const auto& r : s_->records) own[r.seq] = r;
    std::string recent;
    for (const auto& r : s_->records) {
      if (r.seq + 4 > s_->next_seq - 1) recent += (recent.empty() ? "" : "; ") + describe(r) + " " + (r.state == 'C' ? "completed" : r.state == 'F' ? "FAILED" : "in flight");
    }
    out.push_back("this rank's last collectives: " + recent);
  }
  const std::string here = no_spaces(hostname());
  for (int r = 0; r < g.size(); ++r) {
    if (r == me) continue;
    const std::string who = "rank " + std::to_string(r);
    Published p;
    try {
      const std::string key = "ddp_flight/" + std::to_string(r);
      if (!g.store->check({key})) {
        out.push_back(who + " has no flight record in the store: it never reached its first recorded collective");
        continue;
      }
      const std::vector<uint8_t> raw = g.store->get(key);
      if (!parse(std::string(raw.begin(), raw.end()), p)) {
        out.push_back(who + ": its flight record in the store is unreadable");
        continue;
      }
    } catch (const std::exception& e) {
      out.push_back("cannot read " + who + "'s flight record: the store is unreachable (" + short_what(e) +
                    "); the rank that hosts it (rank 0, or the launcher) may be gone");
      continue;
    }
    const std::string where = who + " (host " + p.host + ", pid " + std::to_string(p.pid) + ")";
    std::string last = "none";
    if (!p.records.empty()) {
      const CollectiveRecord& l = p.records.rbegin()->second;
      last = describe(l) + (l.state == 'C' ? ", completed " + ago(l.done_us) : l.state == 'F' ? ", failed" : ", in flight since " + ago(l.issued_us));
    }
    // Gone?
    std::string gone;
    if (p.exited == 2) gone = "it aborted (its own log says why)";
    else if (p.exited) gone = "its program ended";
    else if (p.host == here && process_ended(p.pid)) gone = "its process no longer runs (killed, crashed or exited)";
    else if (p.host != here && (wall_us() - p.heartbeat_us) / 1e6 > kSilentGoneS) gone = "no sign of life for " + seconds((wall_us() - p.heartbeat_us) / 1e6);
    // Skipped? The first sequence number both ranks recorded with different collectives.
    std::string skipped;
    for (const auto& [n, theirs] : p.records) {
      if (!own.count(n)) continue;
      const CollectiveRecord& ours = own[n];
      if (same_collective(ours, theirs)) continue;
      const int order = program_order(ours, theirs, {&own, &p.records});
      const bool they_ahead = order > 0, we_ahead = order < 0;
      const std::string at = "at #" + std::to_string(n) + " " + who + " ran " + what_ran(theirs) + " while this rank ran " + what_ran(ours);
      if (they_ahead) skipped = who + " skipped a collective: " + at + " (it never started the latter)";
      else if (we_ahead) skipped = "this rank (" + std::to_string(me) + ") skipped a collective: " + at;
      else skipped = who + " and this rank disagree: " + at;
      break;
    }
    if (!skipped.empty()) out.push_back(skipped);
    if (!gone.empty()) {
      out.push_back(where + " is gone: " + gone + "; the last collective it reported: " + last);
    } else if (mine.seq > 0 && p.last_seq < mine.seq) {
      out.push_back(who + " is behind: it has not started #" + std::to_string(mine.seq) + " (" +
                    what_ran(mine) + ") that this rank waits in; its last collective: " + last);
    } else if (skipped.empty()) {
      out.push_back(who + " is at its collective " + last);
    }
  }
  return out;
}

c10::intrusive_ptr<c10d::Work> traced(c10::intrusive_ptr<c10d::Work> work, const std::string& name, int64_t bytes) {
  if (!trace().on()) return work;
  const double start = wall_us();
  work->getFuture()->addCallback([name, bytes, start](c10::ivalue::Future&) {
    trace().span(name, "comm", start, wall_us(), Trace::kComm, {{"bytes", bytes}});
  });
  return work;
}

Pending issue(Group& g, const std::string& kind, const std::string& tag, int64_t bytes,
              const std::function<c10::intrusive_ptr<c10d::Work>()>& start) {
  Pending p;
  p.name = kind + " " + tag;
  p.done_us = std::make_shared<std::atomic<double>>(0.0);
  if (g.recorder) p.seq = g.recorder->record(kind, tag, bytes);
  p.issued_us = wall_us();
  p.work = start();
  // The backend runs the collective in its own threads and completes the Work's future there:
  // that is when it really ended (wait() may come much later).
  auto done = p.done_us;
  const int64_t seq = p.seq;
  const std::string name = p.name;
  const double issued = p.issued_us;
  p.work->getFuture()->addCallback([done, seq, name, bytes, issued](c10::ivalue::Future& f) {
    const double t = wall_us();
    done->store(t);
    if (trace().on()) {
      nlohmann::json args{{"bytes", bytes}};
      if (seq > 0) args["seq"] = seq;
      if (f.hasError()) args["error"] = true;
      trace().span(name, "comm", issued, t, Trace::kComm, args);
    }
  });
  return p;
}

void wait(Group& g, Pending& p) {
  try {
    p.work->wait();
  } catch (const std::exception& e) {
    const std::string what = short_what(e);
    if (!g.recorder || p.seq < 0) throw;
    g.recorder->failed(p.seq);
    log("flight recorder: collective " + p.name + " (#" + std::to_string(p.seq) + ") failed: " + what);
    const std::string findings = log_diagnosis(*g.recorder, p.seq);
    throw CollectiveError(p.name + " (#" + std::to_string(p.seq) + ") failed: " + what + " [flight recorder: " + findings + "]");
  }
  if (g.recorder && p.seq > 0) {
    const double t = p.done_us->load();
    g.recorder->completed(p.seq, t > 0 ? t : wall_us());
  }
}

}  // namespace ddp
