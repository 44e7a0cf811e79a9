// provides: atomic checkpoint files with a CRC-checked envelope. See Note [Atomic checkpoints].
#include "common/state/checkpoint.h"

#include <dirent.h>
#include <signal.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/basics/errors.h"
#include "common/basics/failure.h"
#include "common/basics/log.h"
#include "common/launch/net.h"

namespace ddp {
namespace {

constexpr char kMagic[8] = {'D', 'D', 'P', 'C', 'K', 'P', 'T', '1'};
constexpr size_t kHeader = 8 + 8 + 4;  // magic, payload length, CRC-32 of the payload

void write_all(int fd, const char* p, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw std::runtime_error("cannot write " + path + ": " + std::strerror(errno));
    p += w, n -= static_cast<size_t>(w);
  }
}

void fsync_path(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags);
  if (fd >= 0) ::fsync(fd), ::close(fd);
}

std::string name_for(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "ckpt-%09lld.pt", static_cast<long long>(step));
  return buf;
}

// The payload of a checkpoint file, or a reason why it cannot be trusted.
std::string read_payload(const std::string& path, std::string& why) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < kHeader || std::memcmp(bytes.data(), kMagic, 8) != 0) {
    why = "not a checkpoint of this program (bad header)";
    return {};
  }
  uint64_t length = 0;
  uint32_t crc = 0;
  std::memcpy(&length, bytes.data() + 8, 8);
  std::memcpy(&crc, bytes.data() + 16, 4);
  if (bytes.size() - kHeader != length) {
    why = "truncated: " + std::to_string(bytes.size() - kHeader) + " of " + std::to_string(length) + " bytes";
    return {};
  }
  const uint32_t actual = static_cast<uint32_t>(
      ::crc32(0, reinterpret_cast<const Bytef*>(bytes.data() + kHeader), static_cast<uInt>(length)));
  if (actual != crc) {
    why = "corrupt: CRC-32 mismatch";
    return {};
  }
  return bytes.substr(kHeader);
}

}  // namespace

std::vector<std::string> list_checkpoints(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      const std::string n = e->d_name;
      if (n.rfind("ckpt-", 0) == 0 && n.size() > 3 && n.compare(n.size() - 3, 3, ".pt") == 0) names.push_back(n);
    }
    ::closedir(d);
  }
  std::sort(names.begin(), names.end());  // zero-padded step numbers sort as numbers
  for (auto& n : names) n = dir + "/" + n;
  return names;
}

std::vector<std::string> remove_stale_temporaries(const std::string& dir) {
  std::vector<std::string> removed;
  const std::string here = hostname();
  DIR* d = ::opendir(dir.c_str());
  if (!d) return removed;
  while (dirent* e = ::readdir(d)) {
    // .ckpt-<step>.pt.tmp.<host>.<pid>; before the host was added: .ckpt-<step>.pt.tmp.<pid>
    const std::string n = e->d_name;
    const auto at = n.find(".pt.tmp.");
    if (n.rfind(".ckpt-", 0) != 0 || at == std::string::npos) continue;
    const std::string tail = n.substr(at + 8);
    const auto dot = tail.rfind('.');
    const std::string host = dot == std::string::npos ? here : tail.substr(0, dot);
    const std::string pid_text = dot == std::string::npos ? tail : tail.substr(dot + 1);
    if (host != here || pid_text.empty() || pid_text.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(pid_text));
    if (pid <= 0 || ::kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to ask): keep
    const std::string path = dir + "/" + n;
    if (::unlink(path.c_str()) == 0) {
      log("removed " + path + ": left by a writer that died before its rename");
      removed.push_back(path);
    }
  }
  ::closedir(d);
  return removed;
}

std::string save_checkpoint(const std::string& dir, int64_t step, int keep,
                            const std::function<void(torch::serialize::OutputArchive&)>& fill) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    throw UsageError("cannot create the checkpoint folder " + dir + ": " + std::strerror(errno));
  }
  torch::serialize::OutputArchive archive;
  fill(archive);
  std::ostringstream payload_stream;
  archive.save_to(payload_stream);
  const std::string payload = payload_stream.str();
  const uint64_t length = payload.size();
  const uint32_t crc =
      static_cast<uint32_t>(::crc32(0, reinterpret_cast<const Bytef*>(payload.data()), static_cast<uInt>(length)));

  const std::string path = dir + "/" + name_for(step);
  // The writer's host and pid in the name: a file left by a dead writer can be told from a live
  // one's (remove_stale_temporaries).
  const std::string tmp = dir + "/." + name_for(step) + ".tmp." + hostname() + "." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw std::runtime_error("cannot create " + tmp + ": " + std::strerror(errno));
  try {
    write_all(fd, kMagic, 8, tmp);
    write_all(fd, reinterpret_cast<const char*>(&length), 8, tmp);
    write_all(fd, reinterpret_cast<const char*>(&crc), 4, tmp);
    write_all(fd, payload.data(), payload.size(), tmp);
    if (::fsync(fd) != 0) throw std::runtime_error("fsync " + tmp + ": " + std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    throw std::runtime_error("cannot rename " + tmp + " to " + path + ": " + std::strerror(errno));
  }
  fsync_path(dir, O_RDONLY | O_DIRECTORY);  // the rename itself must reach the disk
  auto all = list_checkpoints(dir);
  for (size_t i = 0; i + static_cast<size_t>(keep) < all.size(); ++i) ::unlink(all[i].c_str());
  return path;
}

bool read_checkpoint(const std::string& path, const torch::Device& device, torch::serialize::InputArchive& archive, std::string& why) {
  why.clear();
  if (::access(path.c_str(), R_OK) != 0) {
    why = "missing";
    return false;
  }
  const std::string payload = read_payload(path, why);
  if (!why.empty()) return false;
  archive.load_from(payload.data(), payload.size(), device);
  return true;
}

std::optional<LoadedCheckpoint> load_latest_checkpoint(const std::string& dir, const torch::Device& device,
                                                       const std::function<void(torch::serialize::InputArchive&)>& restore) {
  auto all = list_checkpoints(dir);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    std::string why;
    const std::string payload = read_payload(*it, why);
    if (why.empty()) {  // intact: it is this run's, or it is refused (Note [Never lose a run])
      try {
        torch::serialize::InputArchive archive;
        archive.load_from(payload.data(), payload.size(), device);  // straight onto this rank's device
        restore(archive);
      } catch (const std::exception& e) {
        throw UsageError("refusing to resume from " + *it + ": it is intact but not this run's: " + short_what(e) +
                         ". Nothing in " + dir + " was changed: resume with the settings it was written with, start "
                         "over with --reset (deletes its checkpoints), or use another --out");
      }
      LoadedCheckpoint c;
      c.path = *it;
      c.step = std::stoll(it->substr(it->rfind("ckpt-") + 5, 9));
      return c;
    }
    log("refusing checkpoint " + *it + ": " + why + "; trying the one before it");
  }
  return std::nullopt;
}

}  // namespace ddp
