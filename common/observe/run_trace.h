// defines: open_trace()/finish_trace(): the --trace of one rank of a group, from the first event
// to the merged file.
#pragma once
#include <string>

#include "common/group/process_group.h"

namespace ddp {

// --trace <path>: this rank writes its timeline to <stem>.rank<r>.json (nothing if path is "").
void open_trace(const std::string& path, Group& group);

// Every rank closes its file; after a barrier rank 0 merges them all into `path` and says
// where. Files it cannot see (ranks on other hosts) are left for trace_merge.
void finish_trace(const std::string& path, Group& group);

}  // namespace ddp
