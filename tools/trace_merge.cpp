// trace_merge: merges the per-rank files of --trace into one trace for Perfetto, or draws one
// step of a trace as text, for a terminal.
//
// Usage:
//   ./build-cpu/trace_merge -o runs/trace.json runs/trace.rank0.json runs/trace.rank1.json
//   then open runs/trace.json in https://ui.perfetto.dev (or chrome://tracing)
//   ./build-cpu/trace_merge --text runs/trace.json --step 10      # step 10 of every rank, as text
// Steps count from 1, as the progress lines do: --step 10 draws what "step 10" reports.
// The trainer (05_ddp --trace runs/trace.json) merges by itself at the end of a run; merging by
// hand is for the files of a run that did not end (a rank died), or of ranks on several hosts.
//
// Expected output:
//   [trace_merge] 2 files, 12345 events -> runs/trace.json (open it in https://ui.perfetto.dev)
// and with --text (05, CNN, 2 ranks, --width 110; trimmed):
//   step 100, 91.89 ms from the first rank's forward to the last rank's next one; one character = 0.835 ms
//   rank 0 compute     :   |forward=========================|backward====================================|o |forw|:
//   rank 0 collectives :                                                           |all-redu|all-redu |     :

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>

#include "common/basics/cli.h"
#include "common/basics/errors.h"
#include "common/basics/failure.h"
#include "common/basics/log.h"
#include "common/observe/trace.h"

namespace {

struct Span {
  std::string name;
  int pid = 0, tid = 0;
  double ts = 0, dur = 0;
};

// Step `step` from its first forward to the next step's, one line per rank and track, `width`
// characters wide. Steps count from 1, as the progress lines do. A forward belongs to the step
// after the rank's last "optimizer" span before it (with --grad-accum K a step holds K forwards;
// its first opens the step), numbered from the step 05's trainer wrote with its first "step
// done" instant: a run resumed at step 20 traced steps 21, 22, ...; a trace without such
// instants (03, 04) starts at step 1. A span is its name, cut to its length and padded with
// '='; spans shorter than a character show as '|'.
void print_step(const std::string& path, int step, int width) {
  std::vector<Span> spans;
  std::map<int, std::vector<double>> forwards, optimizer_ends;  // rank -> start of each forward, end of each optimizer span
  std::map<int, std::pair<double, int>> first_done;              // rank -> time and step of its first "step done"
  for (const nlohmann::json& e : ddp::read_trace_events(path)) {
    const std::string ph = e.value("ph", ""), name = e.value("name", "");
    const int rank = static_cast<int>(ddp::event_number(e, "pid"));
    const double ts = ddp::event_number(e, "ts");
    if (ph == "i" && name == "step done" && (!first_done.count(rank) || ts < first_done[rank].first)) {
      first_done[rank] = {ts, static_cast<int>(ddp::event_number(e, "step"))};
    }
    if (ph != "X") continue;
    spans.push_back({name, rank, static_cast<int>(ddp::event_number(e, "tid")), ts, ddp::event_number(e, "dur")});
    if (name == "forward") forwards[rank].push_back(ts);
    if (name == "optimizer") optimizer_ends[rank].push_back(ts + spans.back().dur);
  }
  if (forwards.empty()) throw ddp::UsageError(path + ": no \"forward\" spans: not a --trace file of 03, 04 or 05");
  double from = INFINITY, to = -INFINITY;
  for (auto& rank_forwards : forwards) {  // not a structured binding: C++17 lambdas cannot capture one
    const int rank = rank_forwards.first;
    std::vector<double>& f = rank_forwards.second;
    std::vector<double>& ends = optimizer_ends[rank];
    std::sort(f.begin(), f.end()), std::sort(ends.begin(), ends.end());
    auto ended_by = [&](double t) { return static_cast<int>(std::upper_bound(ends.begin(), ends.end(), t) - ends.begin()); };
    const int first = first_done.count(rank) ? first_done[rank].second - ended_by(first_done[rank].first) + 1 : 1;
    auto step_of = [&](double forward) { return first + ended_by(forward); };
    auto start_of = [&](int n) {  // the first forward of step n, or NaN
      for (double t : f) {
        if (step_of(t) == n) return t;
      }
      return std::nan("");
    };
    const double a = start_of(step), b = start_of(step + 1);
    if (std::isnan(a) || std::isnan(b)) {
      throw ddp::UsageError("--step " + std::to_string(step) + ": rank " + std::to_string(rank) + " traced steps " +
                            std::to_string(step_of(f.front())) + " to " + std::to_string(step_of(f.back())) +
                            ", and a step ends where the next one's forward starts: the last has none");
    }
    from = std::min(from, a), to = std::max(to, b);
  }
  const double per_char = (to - from) / width;
  std::printf("step %d, %.2f ms from the first rank's forward to the last rank's next one; one character = %.3f ms\n", step,
              (to - from) / 1e3, per_char / 1e3);
  for (const auto& [rank, f] : forwards) {
    for (int tid : {0, 1}) {
      std::string lane(width, ' ');
      for (const Span& s : spans) {
        if (s.pid != rank || s.tid != tid || s.ts + s.dur < from || s.ts >= to) continue;
        // Nested spans (a wait inside backward) are drawn over their parent: later ones win.
        const int a = std::max(0, static_cast<int>((s.ts - from) / per_char));
        const int b = std::min(width, static_cast<int>(std::ceil((s.ts + s.dur - from) / per_char)));
        if (b - a <= 1) {
          lane[std::min(a, width - 1)] = '|';
          continue;
        }
        std::string label = "|" + s.name;
        for (int i = a; i < b; ++i) lane[i] = i - a < static_cast<int>(label.size()) ? label[i - a] : '=';
      }
      std::printf("rank %d %-11s :%s:\n", rank, tid == 0 ? "compute" : "collectives", lane.c_str());
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"trace_merge: merge the per-rank trace files of --trace into one, or show a step as text"};
  ddp::show_true_defaults(app);  // Note [Help that tells the truth]
  std::string out, text;
  std::vector<std::string> inputs;
  int step = 10, width = 100;
  app.add_option("-o,--out", out, "The merged trace to write");
  app.add_option("inputs", inputs, "The per-rank files (<name>.rank<r>.json)")->check(CLI::ExistingFile);
  app.add_option("--text", text, "Instead: draw one step of this trace (merged or one rank's) as text")->check(CLI::ExistingFile);
  app.add_option("--step", step, "With --text: which step, counted from 1 as in the progress lines")->check(CLI::PositiveNumber);
  app.add_option("--width", width, "With --text: characters for the whole step")->check(CLI::Range(20, 1000));
  ddp::parse_flags(app, argc, argv);
  ddp::set_log_identity("trace_merge");
  return ddp::guarded_main([&] {
    if (!text.empty()) {
      if (!out.empty() || !inputs.empty()) throw ddp::UsageError("--text draws a trace: no -o and no files to merge with it");
      print_step(text, step, width);
      return ddp::kExitOk;
    }
    if (out.empty() || inputs.empty()) throw ddp::UsageError("give -o <merged.json> and the per-rank files (or --text <trace>)");
    const size_t n = ddp::merge_traces(inputs, out);
    ddp::log(std::to_string(inputs.size()) + " files, " + std::to_string(n) + " events -> " + out +
             " (open it in https://ui.perfetto.dev)");
    return ddp::kExitOk;
  });
}
