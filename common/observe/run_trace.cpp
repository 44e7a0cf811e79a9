// provides: the --trace of a group's rank: its own file, then the merge by rank 0.
#include "common/observe/run_trace.h"

#include <unistd.h>

#include "common/observe/flight_recorder.h"
#include "common/basics/log.h"
#include "common/observe/trace.h"

namespace ddp {

void open_trace(const std::string& path, Group& group) {
  if (!path.empty()) trace().open(rank_trace_path(path, group.rank()), group.rank(), group.info.host);
}

void finish_trace(const std::string& path, Group& group) {
  if (path.empty()) return;
  trace().close();
  run(group, "barrier", "trace-files", 0, [&] { return group.pg->barrier(); });
  if (group.rank() != 0) return;
  std::vector<std::string> files;
  for (int r = 0; r < group.size(); ++r) {
    const std::string f = rank_trace_path(path, r);
    if (::access(f.c_str(), R_OK) != 0) {
      log0("trace: the ranks wrote " + rank_trace_path(path, 0) + " ... on their own hosts: merge them with trace_merge");
      return;
    }
    files.push_back(f);
  }
  const size_t n = merge_traces(files, path);
  log0("trace: " + std::to_string(n) + " events of " + std::to_string(files.size()) + " ranks in " + path +
       " (open it in https://ui.perfetto.dev)");
}

}  // namespace ddp
