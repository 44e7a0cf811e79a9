// trace_merge: merges the per-rank files of --trace into one trace for Perfetto, or draws one
// step of a trace as text, for a terminal.
//
// Usage:
//   ./build-cpu/trace_merge -o runs/trace.json runs/trace.rank0.json runs/trace.rank1.json
//   then open runs/trace.json in https://ui.perfetto.dev (or chrome://tracing)
//   ./build-cpu/trace_merge --text runs/trace.json --step 10      # step 10 of every rank, as text
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

// Step `step` (the step-th "forward" of each rank, counting from 0) from its forward to the next
// forward, one line per rank and track, `width` characters wide. A span is its name, cut to
// its length and padded with '='; spans shorter than a character show as '|'.
void print_step(const std::string& path, int step, int width) {
  std::vector<Span> spans;
  for (const nlohmann::json& e : ddp::read_trace_events(path)) {
    if (e.value("ph", "") != "X") continue;
    spans.push_back({e.value("name", ""), static_cast<int>(ddp::event_number(e, "pid")), static_cast<int>(ddp::event_number(e, "tid")),
                     ddp::event_number(e, "ts"), ddp::event_number(e, "dur")});
  }
  std::map<int, std::vector<double>> forwards;  // rank -> start of each forward
  for (const Span& s : spans) {
    if (s.name == "forward") forwards[s.pid].push_back(s.ts);
  }
  if (forwards.empty()) throw ddp::UsageError(path + ": no \"forward\" spans: not a --trace file of 03, 04 or 05");
  double from = INFINITY, to = -INFINITY;
  for (auto& [rank, f] : forwards) {
    std::sort(f.begin(), f.end());
    if (step < 0 || step + 1 >= static_cast<int>(f.size())) {
      throw ddp::UsageError("--step " + std::to_string(step) + ": rank " + std::to_string(rank) + " traced " +
                            std::to_string(f.size()) + " forwards (the last step has no next forward to end it)");
    }
    from = std::min(from, f[step]), to = std::max(to, f[step + 1]);
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
  app.add_option("--step", step, "With --text: which step (the n-th forward of each rank, from 0)")
      ->check(CLI::NonNegativeNumber);
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
