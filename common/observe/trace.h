// defines: the --trace timeline: one Chrome/Perfetto trace file per rank, and merge_traces().
#pragma once
#include <nlohmann/json.hpp>

#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

namespace ddp {

// Microseconds since the Unix epoch: the one clock that every rank of every host shares (to the
// accuracy of NTP), so that the ranks' timelines line up once merged.
double wall_us();

// Note [Trace files]
// The Trace Event Format of Chrome's about:tracing, which Perfetto (ui.perfetto.dev) opens too.
// Each rank writes its own file in the "JSON Array" form: "[", then one event per line, then
// "]" when the program ends. A rank that dies leaves the "]" out; both viewers accept that, and
// the events written so far (flushed at the end of every step) are kept. An event is a span
// ("ph":"X", start "ts" and "dur" in microseconds) or an instant ("ph":"i") on a track: "pid"
// is the rank, "tid" the track (kCompute: what the rank's main thread does; kComm: its
// collectives, which run in the backend's own threads).
class Trace {
 public:
  // GPU streams (Note [A GPU's timeline]) are tracks kGpuStreams + the stream's id.
  enum Track : int { kCompute = 0, kComm = 1, kGpuStreams = 100 };

  // Starts writing to `path`; until then (no --trace) every call returns at once.
  void open(const std::string& path, int rank, const std::string& host);
  bool on() const { return file_ != nullptr; }
  // `args`: the event's details, a JSON object ({{"bucket", 0}, {"bytes", 1048576}}) or nothing.
  void span(const std::string& name, const char* cat, double start_us, double end_us, Track track,
            const nlohmann::json& args = nlohmann::json::object());
  void instant(const std::string& name, const char* cat, double t_us, Track track,
               const nlohmann::json& args = nlohmann::json::object());
  // The name a viewer shows for a track.
  void thread_name(Track track, const std::string& name);
  void flush();
  void close();  // also at exit
  ~Trace() { close(); }

 private:
  void write(const nlohmann::json& event, bool first = false);
  std::mutex mu_;  // collectives end on the backend's threads
  std::FILE* file_ = nullptr;
  int rank_ = 0;
};

// The process's timeline (one per rank).
Trace& trace();

// A span on the compute track from construction to destruction: { Span s("forward"); ... }.
class Span {
 public:
  explicit Span(std::string name, const char* cat = "compute") : name_(std::move(name)), cat_(cat), start_(trace().on() ? wall_us() : 0) {}
  ~Span() {
    if (trace().on()) trace().span(name_, cat_, start_, wall_us(), Trace::kCompute);
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  std::string name_;
  const char* cat_;
  double start_;
};

// The events of a trace file: a rank's (a JSON array) or a merged one ({"traceEvents": [...]}).
// A rank killed mid-run leaves its array unclosed: then each line, one event as Trace writes
// them, is read on its own. Throws UsageError naming the file (and line) if it is neither.
std::vector<nlohmann::json> read_trace_events(const std::string& path);
// A numeric member of an event ("ts", "dur", "pid", "tid"), or of its "args" ("bytes"); NaN if
// it has none.
double event_number(const nlohmann::json& event, const std::string& key);

// "out.json" -> "out.rank1.json": the file rank `rank` writes for --trace out.json.
std::string rank_trace_path(const std::string& path, int rank);

// Merges per-rank trace files into one trace (a JSON object with "traceEvents"), the time
// shifted so that the earliest event is at 0. Returns how many events it wrote. Throws
// UsageError naming file and line for anything --trace does not write.
size_t merge_traces(const std::vector<std::string>& inputs, const std::string& out);

}  // namespace ddp
