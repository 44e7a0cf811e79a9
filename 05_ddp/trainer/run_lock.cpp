// provides: claim_run_folder(): rank 0's lock on <folder>/run.lock, its verdict sent to every rank.
#include "05_ddp/trainer/run_lock.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/basics/errors.h"
#include "common/basics/paths.h"
#include "common/launch/net.h"
#include "common/observe/flight_recorder.h"

namespace ddp {

// Note [One run per folder]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// Two runs in one --out destroy each other: the second one's --reset deletes the first one's
// checkpoints while it is writing them, or the second resumes from a checkpoint the first is
// still rotating; both append to metrics.jsonl and to each rank<r>.log. A job submitted twice,
// or a rerun by hand beside a requeued job, is enough. So a run claims its folder, and refuses
// (exit 2, naming the holder's host and pid) one that a live run holds; the folder of a run that
// died (killed, crashed, its node lost, a restart by the launcher) is taken over, as the
// temporary checkpoint files of dead writers are (remove_stale_temporaries).
//
// "Live" is decided by the kernel: rank 0 holds flock(LOCK_EX) on <folder>/run.lock for the life
// of the run, and a lock is released when its holder dies, however it dies (SIGKILL too; on a
// network file system the server frees a lost client's locks, NFSv4 when its lease runs out:
// 90 s by default). A pid written in a file cannot decide it: the pid of a process on another
// host cannot be asked, and a dead run's pid may belong to another process by now. The file also
// holds a record (host, pid, start time, world size): for the message, not for the decision. A
// run that ends (also with an error it caught) clears its record, so a record that the next
// holder finds says that run died without ending: the new run logs that it took over. The file
// itself is never deleted: a run that started just after the unlink would lock a new file of the
// same name while the old holder still writes.
//
// Rank 0 alone claims, because every rank of one run writes into the folder (its rank<r>.log),
// on every node when the folder is shared: a lock per rank would have a run refuse its own
// ranks. The other ranks learn rank 0's verdict in one broadcast and stop with it, rather than
// wait in their next collective for a rank that left. A restart (02_spawn or torchrun
// --max-restarts) stops every worker of the failed attempt before it starts the next, so the
// new rank 0 finds the lock free and takes over.
//
// The claim comes before RunOutput opens anything, so that a refused run leaves no trace: no
// rank<r>.log opened (it would append to the live run's), no metrics.jsonl line, no TensorBoard
// file, and --reset, which runs after, removes nothing. Creating the empty run.lock in a folder
// nobody held is all a run does before it holds the folder. --eval-only is refused too: it
// appends to metrics.jsonl and reads checkpoints that the live run may be deleting.
//
// Where flock is not supported (ENOLCK, EOPNOTSUPP, EINVAL, ENOSYS: some network file systems
// mounted without locks), the record decides: a run of this host is alive while its pid is
// (kill(pid, 0)); of another host this run cannot tell, so it refuses and says to delete
// run.lock if that run is gone. Honest aside: without locks two runs that start at the same
// moment can both find no record; and a file system that takes flock but keeps it per node
// (Lustre mounted with localflock) lets a second node in. Ranks of a run that died may live on
// a little (until their next collective fails or the launcher stops them) and add a line to
// their rank<r>.log after the new holder's.

namespace {

constexpr int64_t kVerdictBytes = 1024;  // rank 0's refusal ("": claimed), the size every rank receives

struct Record {
  std::string host, started;
  long pid = 0;
  int world = 0;
};

std::string read_record_text(int fd) {
  std::string text;
  char buf[512];
  for (off_t at = 0;;) {
    const ssize_t n = ::pread(fd, buf, sizeof(buf), at);
    if (n <= 0) return text;
    text.append(buf, static_cast<size_t>(n));
    at += n;
  }
}

std::optional<Record> read_record(int fd) {
  const auto j = nlohmann::json::parse(read_record_text(fd), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("pid") || !j["pid"].is_number_integer()) return std::nullopt;
  return Record{j.value("host", "?"), j.value("started", "?"), j["pid"].get<long>(), j.value("world_size", 0)};
}

std::string describe(const Record& r) {
  return "pid " + std::to_string(r.pid) + " on host " + r.host + ", started " + r.started + " (world size " +
         std::to_string(r.world) + ")";
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm t{};
  ::gmtime_r(&now, &t);
  char b[32];
  std::strftime(b, sizeof(b), "%Y-%m-%d %H:%M:%S UTC", &t);
  return b;
}

bool no_locks_here(int err) { return err == ENOLCK || err == EOPNOTSUPP || err == EINVAL || err == ENOSYS; }

// Rank 0: "" with the folder held through `fd` (set), or why it is refused (`fd` closed).
std::string try_claim(const std::string& folder, int world, int& fd, std::string& took_over) {
  make_dirs(folder);
  const std::string path = folder + "/run.lock";
  fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);  // CLOEXEC: programs we start must not hold it
  if (fd < 0) throw UsageError("cannot open " + path + ": " + std::strerror(errno));
  auto refuse = [&](const std::string& why) {
    ::close(fd);
    fd = -1;
    return why;
  };
  const std::string advice = "; wait for it to end, stop it, or give this run its own --out";
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err == EWOULDBLOCK) {
      // The holder writes its record just after it locks: give it a moment.
      std::optional<Record> r;
      for (int k = 0; k < 20 && !(r = read_record(fd)); ++k) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      return refuse(folder + " is in use by another run: " + (r ? describe(*r) : "(it has not written who it is)") + advice);
    }
    if (!no_locks_here(err)) throw UsageError(refuse("cannot lock " + path + ": " + std::strerror(err)));
    // No locks on this file system: the record decides (see the Note).
    const std::optional<Record> r = read_record(fd);
    const std::string why = "; its file system has no locks (flock: " + std::string(std::strerror(err)) + ")";
    if (r && r->host != hostname()) {
      return refuse(folder + " may be in use by another run: " + describe(*r) + why +
                    ", and a pid on another host cannot be asked. If that run is gone, delete " + path +
                    "; else wait for it to end, stop it, or give this run its own --out");
    }
    if (r && r->pid > 0 && r->pid != ::getpid() && (::kill(static_cast<pid_t>(r->pid), 0) == 0 || errno != ESRCH)) {
      return refuse(folder + " is in use by another run: " + describe(*r) + why + ", its pid is alive" + advice);
    }
  }
  // Ours. A record left in it is a run that died without ending (a run that ends clears it).
  if (const std::optional<Record> earlier = read_record(fd)) {
    took_over = "took over " + folder + " from the run of " + describe(*earlier) +
                ", which is no longer running (it died without ending: killed, crashed, or its node lost)";
  }
  const std::string record = nlohmann::ordered_json{{"host", hostname()}, {"pid", static_cast<long>(::getpid())},
                                                    {"started", utc_now()}, {"world_size", world}}.dump() + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, record.data(), record.size(), 0) != static_cast<ssize_t>(record.size())) {
    throw UsageError("cannot write " + path + ": " + std::strerror(errno));
  }
  return "";
}

}  // namespace

RunLock::RunLock(RunLock&& other) noexcept : took_over(std::move(other.took_over)), fd_(other.fd_) { other.fd_ = -1; }

RunLock& RunLock::operator=(RunLock&& other) noexcept {
  if (this != &other) {
    release();
    took_over = std::move(other.took_over);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

RunLock::~RunLock() { release(); }

void RunLock::release() {
  if (fd_ < 0) return;
  (void)!::ftruncate(fd_, 0);  // this run ended: no record, so the next one does not report a death
  ::close(fd_);  // the lock goes with the last descriptor of the open file
  fd_ = -1;
}

RunLock claim_run_folder(const std::string& folder, Group& group, const torch::Device& device) {
  RunLock lock;
  std::string refusal;
  if (group.rank() == 0) {
    try {
      refusal = try_claim(folder, group.size(), lock.fd_, lock.took_over);
    } catch (const std::exception& e) {  // the folder cannot be made or opened: the others must stop too
      lock.release();
      refusal = e.what();
    }
  }
  if (group.size() > 1) {
    torch::Tensor verdict = torch::zeros({kVerdictBytes}, torch::kUInt8);
    std::memcpy(verdict.data_ptr<uint8_t>(), refusal.data(), std::min<size_t>(refusal.size(), kVerdictBytes - 1));
    std::vector<torch::Tensor> tensors{verdict.to(device)};  // NCCL sends GPU tensors only
    run(group, "broadcast", "run_folder_claim", kVerdictBytes, [&] { return group.pg->broadcast(tensors); });
    if (group.rank() != 0) {
      const torch::Tensor got = tensors[0].cpu();
      const std::string text(reinterpret_cast<const char*>(got.data_ptr<uint8_t>()));
      if (!text.empty()) refusal = "rank 0 could not claim the run folder: " + text;
    }
  }
  if (!refusal.empty()) throw UsageError(refusal);
  return lock;
}

}  // namespace ddp
