// provides: the per-rank trace writer and the merge of the ranks' files.
#include "common/observe/trace.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>

#include "common/basics/errors.h"
#include "common/basics/paths.h"

namespace ddp {

double wall_us() {
  using namespace std::chrono;
  return duration<double, std::micro>(system_clock::now().time_since_epoch()).count();
}

Trace& trace() {
  static Trace t;
  return t;
}

namespace {
// Microseconds to the nanosecond: the viewers need no more, and the files stay short.
double micro(double us) { return std::round(us * 1e3) / 1e3; }
}  // namespace

void Trace::open(const std::string& path, int rank, const std::string& host) {
  close();
  const auto slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) make_dirs(path.substr(0, slash));
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) throw UsageError("--trace: cannot write " + path);
  {
    std::lock_guard<std::mutex> lock(mu_);
    file_ = f;
    rank_ = rank;
    std::fputs("[\n", file_);
  }
  // Metadata events: the names Perfetto shows for the process (the rank) and its tracks.
  const std::string r = std::to_string(rank);
  write({{"name", "process_name"}, {"ph", "M"}, {"pid", rank}, {"tid", 0}, {"args", {{"name", "rank " + r + " (" + host + ")"}}}},
        /*first=*/true);
  write({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", rank}, {"tid", 0}, {"args", {{"sort_index", rank}}}});
  thread_name(kCompute, "compute");
  thread_name(kComm, "collectives");
}

// One event per line, so that a rank killed mid-run leaves every finished line readable.
void Trace::write(const nlohmann::json& event, bool first) {
  const std::string line = (first ? "" : ",") + event.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  std::lock_guard<std::mutex> lock(mu_);
  if (file_) std::fputs(line.c_str(), file_);
}

void Trace::span(const std::string& name, const char* cat, double start_us, double end_us, Track track,
                 const nlohmann::json& args) {
  if (!on()) return;
  write({{"name", name}, {"cat", cat}, {"ph", "X"}, {"ts", micro(start_us)}, {"dur", micro(std::max(0.0, end_us - start_us))},
         {"pid", rank_}, {"tid", static_cast<int>(track)}, {"args", args}});
}

void Trace::instant(const std::string& name, const char* cat, double t_us, Track track, const nlohmann::json& args) {
  if (!on()) return;
  write({{"name", name}, {"cat", cat}, {"ph", "i"}, {"s", "t"}, {"ts", micro(t_us)}, {"pid", rank_},
         {"tid", static_cast<int>(track)}, {"args", args}});
}

void Trace::thread_name(Track track, const std::string& name) {
  if (!on()) return;
  write({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank_}, {"tid", static_cast<int>(track)}, {"args", {{"name", name}}}});
}

void Trace::flush() {
  std::lock_guard<std::mutex> lock(mu_);
  if (file_) std::fflush(file_);
}

void Trace::close() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!file_) return;
  std::fputs("]\n", file_);
  std::fclose(file_);
  file_ = nullptr;
}

std::vector<nlohmann::json> read_trace_events(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UsageError("cannot read trace file " + path);
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json doc = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  const nlohmann::json* events = doc.is_array() ? &doc : doc.is_object() && doc.contains("traceEvents") ? &doc["traceEvents"] : nullptr;
  std::vector<nlohmann::json> out;
  if (events && events->is_array()) {
    out.assign(events->begin(), events->end());
  } else {  // unclosed: a rank that did not reach the end; each line is one event
    text.clear(), text.seekg(0);
    std::string line;
    for (int n = 1; std::getline(text, line); ++n) {
      if (line == "[" || line == "]" || line.empty()) continue;
      if (line[0] == ',') line.erase(0, 1);
      nlohmann::json e = nlohmann::json::parse(line, nullptr, false);
      if (!e.is_object()) throw UsageError(path + ":" + std::to_string(n) + ": not an event line of a --trace file");
      out.push_back(std::move(e));
    }
  }
  for (size_t i = 0; i < out.size(); ++i) {
    const nlohmann::json& e = out[i];
    if (!e.is_object() || !e.contains("ph") || (e.contains("ts") && !e["ts"].is_number())) {
      throw UsageError(path + ": event " + std::to_string(i + 1) + " is not an event of a --trace file: " + e.dump().substr(0, 120));
    }
  }
  return out;
}

double event_number(const nlohmann::json& event, const std::string& key) {
  for (const nlohmann::json* where : {&event, event.contains("args") ? &event["args"] : nullptr}) {
    if (where && where->is_object() && where->contains(key) && (*where)[key].is_number()) return (*where)[key].get<double>();
  }
  return NAN;
}

std::string rank_trace_path(const std::string& path, int rank) {
  const auto slash = path.rfind('/');
  const auto dot = path.rfind('.');
  const bool has_ext = dot != std::string::npos && (slash == std::string::npos || dot > slash + 1);
  const std::string stem = has_ext ? path.substr(0, dot) : path;
  return stem + ".rank" + std::to_string(rank) + (has_ext ? path.substr(dot) : ".json");
}

size_t merge_traces(const std::vector<std::string>& inputs, const std::string& out) {
  if (inputs.empty()) throw UsageError("no trace files to merge");
  std::vector<nlohmann::json> events;
  double t0 = std::numeric_limits<double>::infinity();
  for (const std::string& path : inputs) {
    for (nlohmann::json& e : read_trace_events(path)) {
      if (e.contains("ts")) t0 = std::min(t0, e["ts"].get<double>());
      events.push_back(std::move(e));
    }
  }
  // Time from the first event of any rank: the ranks stay aligned with each other.
  for (nlohmann::json& e : events) {
    if (e.contains("ts")) e["ts"] = micro(e["ts"].get<double>() - t0);
  }
  const std::string tmp = out + ".tmp";
  {
    std::ofstream o(tmp);
    if (!o) throw UsageError("cannot write " + out);
    o << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";  // one event per line, as the ranks' files
    for (size_t i = 0; i < events.size(); ++i) o << (i ? "," : "") << events[i].dump() << "\n";
    o << "]}\n";
    if (!o.flush()) throw std::runtime_error("writing " + out + " failed");
  }
  if (std::rename(tmp.c_str(), out.c_str()) != 0) throw std::runtime_error("cannot rename " + tmp + " to " + out);
  return events.size();
}

}  // namespace ddp
