// provides: the roll call's refusals and error paths (see roll_call_errors.h), beside its lesson.
#include "common/group/roll_call_errors.h"

#include <pwd.h>
#include <unistd.h>

#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "common/basics/failure.h"
#include "common/basics/log.h"
#include "common/launch/net.h"

namespace ddp {
namespace {

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }
std::string join_ints(const std::vector<int>& v) {
  std::ostringstream os;
  for (size_t k = 0; k < v.size(); ++k) os << (k ? ", " : "") << v[k];
  return os.str();
}

// "rank 1 on host vm pid 1234": who is speaking, in a conflict's message.
std::string me(const RankInfo& info) {
  return "rank " + std::to_string(info.rank.value) + " on host " + info.host + " pid " + std::to_string(::getpid());
}

// With --init file://, a store file left by an earlier run also causes conflicts: say so.
std::string file_hint(const RankInfo& info) {
  return info.file_init() ? " (with --init file://, a store file left by an earlier run also causes this: delete " +
                                info.file_path() + ")"
                          : "";
}

// The rank that hosts the store waits (two seconds at most) until the others have read why the
// roll call stopped: if it left at once they would only see the store vanish ("Connection
// reset") and never learn why.
void linger_if_hosting(c10d::Store& store, const RankInfo& info) {
  const bool hosting = info.rank.value == 0 && !info.external_store.value && !info.file_init();
  if (!hosting) return;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (store.add("rollcall/abort_seen", 0) < store.add("rollcall/arrived", 0) - 1 &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// Stops every rank: the reason goes into the store, prefixed with its kind (U: usage, J: join).
[[noreturn]] void stop_everyone(c10d::Store& store, const RankInfo& info, bool usage, const std::string& reason) {
  store.set("rollcall/abort", bytes((usage ? "U" : "J") + reason));
  linger_if_hosting(store, info);
  if (usage) throw UsageError(reason + file_hint(info));
  throw JoinError(reason);
}

}  // namespace

std::string roll_call_key(int rank) { return "rollcall/rank/" + std::to_string(rank); }

// Note [One user's store]
// Twenty students on one server, each starting chapter 01 from two terminals with torchrun's
// default MASTER_PORT 29500: the first student's rank 0 holds the port (the others' rank 0 are
// refused: "port 29500 is already in use"), but every student's rank 1 reaches that store and
// would claim a rank in a stranger's group. A TCP store has no owner, so rank 0 records its user
// (rollcall/user) and every other rank waits for that record before it writes anything: a
// process of another user leaves at once with exit 2, and the owner's group goes on as if it had
// never come. (Rank 0 and not the first to arrive: students start rank 1 first as often as not.)
// Ranks of one job always run as one user (torchrun, srun, 02_spawn), so this refuses nothing
// real. The classroom's fix is a port per student: docs/teaching.md.
void refuse_a_strangers_store(c10d::Store& store, const RankInfo& info, std::chrono::steady_clock::time_point deadline) {
  // Rank 0 records its user; the others wait for the record (a stranger's rank started first
  // must not record itself) and leave if it is not theirs.
  const passwd* pw = ::getpwuid(::getuid());
  const std::string user = std::string(pw ? pw->pw_name : "?") + " (uid " + std::to_string(::getuid()) + ")";
  if (info.rank.value == 0) {
    store.set("rollcall/user", bytes(user));
    return;
  }
  while (!store.check({"rollcall/user"}) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const std::string owner = store.check({"rollcall/user"}) ? text(store.get("rollcall/user")) : user;
  if (owner != user) {  // touch nothing more of a stranger's store
    throw UsageError("the store at " + info.store_address() + " belongs to a run of user " + owner + ", and you are " + user +
                     ": another user's job uses this port. Give your ranks a port of your own, e.g. " +
                     free_port_hint());
  }
}

void refuse_disagreements(c10d::Store& store, const RankInfo& info) {
  // The world size is checked before the rank is claimed: a claim from a process with the
  // wrong size could otherwise complete the others' roll call before it is refused.
  const std::string ws = std::to_string(info.world_size.value);
  const std::string first_ws = text(store.compareSet("rollcall/world_size", {}, bytes(ws)));
  if (first_ws != ws) {
    stop_everyone(store, info, true, "world sizes disagree: " + me(info) + " was started with world size " + ws +
                                         ", the first rank to arrive with world size " + first_ws);
  }
  // Each host chooses the default backend from its own GPUs (Note [Choosing the backend]):
  // a rank on Gloo and one on NCCL would never meet in a collective.
  const std::string mine = info.backend.value + " (" + info.backend.source + ")";
  const std::string first_backend = text(store.compareSet("rollcall/backend", {}, bytes(mine)));
  if (first_backend.substr(0, first_backend.find(' ')) != info.backend.value) {
    stop_everyone(store, info, true, "backends disagree: " + me(info) + " chose " + mine + ", the first rank to arrive " +
                                         first_backend + ". Give every rank the same --backend");
  }
}

void refuse_double_claim(c10d::Store& store, const RankInfo& info) {
  stop_everyone(store, info, true, "rank " + std::to_string(info.rank.value) + " was claimed by two processes (the second is " +
                                       me(info) + "): give every process its own --rank");
}

void stop_if_another_rank_stopped(c10d::Store& store, const RankInfo& info) {
  if (!store.check({"rollcall/abort"})) return;
  const std::string reason = text(store.get("rollcall/abort"));
  store.add("rollcall/abort_seen", 1);
  linger_if_hosting(store, info);
  if (reason.rfind("U", 0) == 0) throw UsageError("another process stopped the roll call: " + reason.substr(1) + file_hint(info));
  throw JoinError(reason.substr(1));
}

void stop_naming_the_missing(c10d::Store& store, const RankInfo& info) {
  std::vector<int> present, missing;
  for (int i = 0; i < info.world_size.value; ++i) (store.check({roll_call_key(i)}) ? present : missing).push_back(i);
  if (missing.empty()) return;  // the last one arrived just now
  stop_everyone(store, info, false,
                std::string(missing.size() == 1 ? "rank " : "ranks ") + join_ints(missing) + " never joined within " +
                    seconds(info.timeout_s.value) + " (world size " + std::to_string(info.world_size.value) +
                    "; present: " + join_ints(present) + "). Start the missing rank(s) with the same " +
                    (info.file_init() ? "--init " + info.init.value : "master address and port (" + info.store_address() + ")") +
                    ", or lower --world-size");
}

JoinError lost_the_store(const RankInfo& info, const std::exception& e) {
  return JoinError("lost the store at " + info.store_address() + " during the roll call: " +
                   (info.external_store.value ? "the launcher" : "rank 0") +
                   ", which hosts it, has exited; its own error says why (" + short_what(e) + ")");
}

}  // namespace ddp
