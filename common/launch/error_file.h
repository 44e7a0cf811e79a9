// defines: write_error_file()/read_error_file(): a failing worker's "why", left for its launcher.
#pragma once
#include <optional>
#include <string>

namespace ddp {

// torchrun gives each worker a path in TORCHELASTIC_ERROR_FILE; a worker that fails writes
// its error there, and torchrun's "Root Cause" table shows it instead of
// "error_file: <N/A>". 02_spawn does the same. The file is JSON in torchrun's layout:
//   {"message": {"message": "...", "extraInfo": {"py_callstack": "...", "timestamp": "<epoch s>",
//                 "monotonic_s": "<CLOCK_MONOTONIC s>"}}}
// monotonic_s is ours: one clock for all processes of a machine, fine enough to tell which
// of two workers failed first.
constexpr const char* kErrorFileVar = "TORCHELASTIC_ERROR_FILE";

struct ErrorRecord {
  std::string message;
  double monotonic_s = 0;
};

double monotonic_seconds();

// Writes `message` to $TORCHELASTIC_ERROR_FILE if it is set (atomically: temporary + rename).
// The first error a process records wins, as torchrun expects.
void write_error_file(const std::string& message);
std::optional<ErrorRecord> read_error_file(const std::string& path);

}  // namespace ddp
