// provides: SampleLog. See Note [Which images each rank saw].
#include "05_ddp/beyond/sample_log.h"

#include <cerrno>
#include <cstring>

#include "common/basics/errors.h"

namespace ddp {

SampleLog::SampleLog(const std::string& path, int rank) {
  if (path.empty()) return;
  const std::string file = path + ".rank" + std::to_string(rank);
  f_ = std::fopen(file.c_str(), "a");
  if (!f_) throw UsageError("--record-samples: cannot write " + file + ": " + std::strerror(errno));
}

SampleLog::~SampleLog() {
  if (f_) std::fclose(f_);
}

void SampleLog::record(int64_t step, const std::vector<int64_t>& order, int64_t from, int64_t to) {
  if (!f_) return;
  std::string line = std::to_string(step + 1);  // the step as the progress lines number it
  for (int64_t i = from; i < to; ++i) line += " " + std::to_string(order[i]);
  std::fputs((line + "\n").c_str(), f_);
  std::fflush(f_);  // a rank killed on purpose keeps what it recorded
}

}  // namespace ddp
