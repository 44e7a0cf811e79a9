// trace_merge: merges the per-rank files of --trace into one trace for Perfetto.
//
// Usage:
//   ./build-cpu/trace_merge -o runs/trace.json runs/trace.rank0.json runs/trace.rank1.json
//   then open runs/trace.json in https://ui.perfetto.dev (or chrome://tracing)
// The trainer (05_ddp --trace runs/trace.json) merges by itself at the end of a run; this tool
// is for the files of a run that did not end (a rank died), or of ranks on several hosts.
//
// Expected output:
//   [trace_merge] 2 files, 12345 events -> runs/trace.json (open it in https://ui.perfetto.dev)

#include "common/cli.h"
#include "common/failure.h"
#include "common/log.h"
#include "common/trace.h"

int main(int argc, char** argv) {
  CLI::App app{"trace_merge: merge the per-rank trace files of --trace into one"};
  std::string out;
  std::vector<std::string> inputs;
  app.add_option("-o,--out", out, "The merged trace to write")->required();
  app.add_option("inputs", inputs, "The per-rank files (<name>.rank<r>.json)")->required()->check(CLI::ExistingFile);
  ddp::parse_flags(app, argc, argv);
  ddp::set_log_identity("trace_merge");
  return ddp::guarded_main([&] {
    const size_t n = ddp::merge_traces(inputs, out);
    ddp::log(std::to_string(inputs.size()) + " files, " + std::to_string(n) + " events -> " + out +
             " (open it in https://ui.perfetto.dev)");
    return ddp::kExitOk;
  });
}
