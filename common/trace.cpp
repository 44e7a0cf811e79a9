// provides: the per-rank trace writer and the merge of the ranks' files.
#include "common/trace.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>

#include "common/errors.h"
#include "common/paths.h"

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
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out + "\"";
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3f", v);
  return buf;
}
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
    // Metadata events: the names Perfetto shows for the process (the rank) and its tracks.
    const std::string pid = std::to_string(rank);
    std::fputs(("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + pid + ",\"tid\":0,\"args\":{\"name\":" +
                quoted("rank " + pid + " (" + host + ")") + "}}\n")
                   .c_str(),
               file_);
    std::fputs((",{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":" + pid + ",\"tid\":0,\"args\":{\"sort_index\":" + pid + "}}\n").c_str(), file_);
  }
  thread_name(kCompute, "compute");
  thread_name(kComm, "collectives");
}

void Trace::write(const std::string& event) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!file_) return;
  std::fputs(",", file_);
  std::fputs(event.c_str(), file_);
  std::fputs("\n", file_);
}

void Trace::span(const std::string& name, const char* cat, double start_us, double end_us, Track track,
                 const std::string& args) {
  if (!on()) return;
  write("{\"name\":" + quoted(name) + ",\"cat\":\"" + cat + "\",\"ph\":\"X\",\"ts\":" + number(start_us) +
        ",\"dur\":" + number(std::max(0.0, end_us - start_us)) + ",\"pid\":" + std::to_string(rank_) +
        ",\"tid\":" + std::to_string(track) + ",\"args\":{" + args + "}}");
}

void Trace::instant(const std::string& name, const char* cat, double t_us, Track track, const std::string& args) {
  if (!on()) return;
  write("{\"name\":" + quoted(name) + ",\"cat\":\"" + cat + "\",\"ph\":\"i\",\"s\":\"t\",\"ts\":" + number(t_us) +
        ",\"pid\":" + std::to_string(rank_) + ",\"tid\":" + std::to_string(track) + ",\"args\":{" + args + "}}");
}

void Trace::thread_name(Track track, const std::string& name) {
  if (!on()) return;
  write("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" + std::to_string(rank_) + ",\"tid\":" + std::to_string(track) +
        ",\"args\":{\"name\":" + quoted(name) + "}}");
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

std::string event_name(const std::string& line) {
  const auto at = line.find("\"name\":\"");
  return at == std::string::npos ? "" : line.substr(at + 8, line.find('"', at + 8) - at - 8);
}

double event_number(const std::string& line, const std::string& key) {
  const auto at = line.find("\"" + key + "\":");
  return at == std::string::npos ? NAN : std::strtod(line.c_str() + at + key.size() + 3, nullptr);
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
  std::vector<std::string> events;
  double t0 = std::numeric_limits<double>::infinity();
  std::vector<std::pair<size_t, double>> times;  // event index, its ts
  for (const std::string& path : inputs) {
    std::ifstream in(path);
    if (!in) throw UsageError("cannot read trace file " + path);
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
      if (line == "[" || line == "]" || line.empty()) continue;
      if (line[0] == ',') line.erase(0, 1);
      if (line.size() < 2 || line.front() != '{' || line.back() != '}' || line.find("\"ph\":") == std::string::npos) {
        throw UsageError(path + ":" + std::to_string(n) + ": not an event line of a --trace file");
      }
      const auto at = line.find("\"ts\":");
      if (at != std::string::npos) {
        char* end = nullptr;
        const double ts = std::strtod(line.c_str() + at + 5, &end);
        if (end == line.c_str() + at + 5 || !std::isfinite(ts)) {
          throw UsageError(path + ":" + std::to_string(n) + ": the event's \"ts\" is not a number");
        }
        t0 = std::min(t0, ts);
        times.emplace_back(events.size(), ts);
      }
      events.push_back(line);
    }
  }
  // Time from the first event of any rank: the ranks stay aligned with each other.
  for (const auto& [i, ts] : times) {
    std::string& e = events[i];
    const auto at = e.find("\"ts\":") + 5;
    const auto end = e.find_first_of(",}", at);
    e.replace(at, end - at, number(ts - t0));
  }
  const std::string tmp = out + ".tmp";
  {
    std::ofstream o(tmp);
    if (!o) throw UsageError("cannot write " + out);
    o << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
    for (size_t i = 0; i < events.size(); ++i) o << (i ? "," : "") << events[i] << "\n";
    o << "]}\n";
    if (!o.flush()) throw std::runtime_error("writing " + out + " failed");
  }
  if (std::rename(tmp.c_str(), out.c_str()) != 0) throw std::runtime_error("cannot rename " + tmp + " to " + out);
  return events.size();
}

}  // namespace ddp
