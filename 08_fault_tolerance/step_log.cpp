// provides: StepLog and the step line's two directions.
#include "08_fault_tolerance/step_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "common/basics/errors.h"
#include "common/basics/log.h"

namespace ch08 {

StepLog::StepLog(const std::string& folder, const std::string& replica_id) {
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  const std::string path = folder + "/steps." + replica_id + ".txt";
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);  // O_APPEND: a group's ranks share it
  if (fd_ < 0 && errno == EEXIST)
    throw ddp::UsageError("replica id '" + replica_id + "' already ran in this run (" + path +
                          " exists): a replacement takes a new --replica-id, a new run a new --run or --out");
  if (fd_ < 0) throw ddp::UsageError("cannot create " + path + ": " + std::strerror(errno));
}

StepLog::~StepLog() {
  if (fd_ >= 0) ::close(fd_);
}

void StepLog::line(const std::string& text) {
  if (follower_ && text.rfind("fault ", 0) != 0) return;
  const std::string l = text + "\n";
  if (::write(fd_, l.data(), l.size()) != static_cast<ssize_t>(l.size())) throw std::runtime_error("the step log: write failed");
}

void StepLog::recovered(int64_t step, const std::vector<double>& t) {
  if (follower_) return;
  char said[200];
  std::snprintf(said, sizeof(said), "recovered: step %lld committed %.3fs after the failure (quorum %.3fs, new group %.3fs, "
                "healing %.3fs, the step %.3fs)", static_cast<long long>(step), t[4] - t[0], t[1] - t[0], t[2] - t[1], t[3] - t[2],
                t[4] - t[3]);
  ddp::log(said);
  line("recovered " + std::to_string(t[1]) + " " + std::to_string(t[2]) + " " + std::to_string(t[3]) + " " + std::to_string(t[4]) +
       " step " + std::to_string(step));
}

std::string format_step(const StepRecord& r) {
  std::string c;
  for (const std::string& id : r.contributors) c += (c.empty() ? "" : ",") + id;
  return "step " + std::to_string(r.step) + " position " + std::to_string(r.position) + " batch " + std::to_string(r.batch) +
         " contributors " + c + " quorum " + std::to_string(r.quorum) + " average " + r.average +
         (r.ranks > 1 ? " ranks " + std::to_string(r.ranks) : "");
}

bool parse_step(const std::string& line, StepRecord& r) {
  std::istringstream in(line);
  std::string w[6], contributors;
  in >> w[0] >> r.step >> w[1] >> r.position >> w[2] >> r.batch >> w[3] >> contributors >> w[4] >> r.quorum >> w[5] >> r.average;
  if (!in || w[0] != "step" || w[1] != "position" || w[2] != "batch" || w[3] != "contributors" || w[4] != "quorum" ||
      w[5] != "average")
    return false;
  std::string ranks_word;
  r.ranks = 1;
  if (in >> ranks_word && (ranks_word != "ranks" || !(in >> r.ranks) || r.ranks < 1)) return false;
  r.contributors.clear();
  std::istringstream ids(contributors);
  for (std::string id; std::getline(ids, id, ',');) r.contributors.push_back(id);
  return true;
}

}  // namespace ch08
