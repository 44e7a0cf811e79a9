// provides: roll_call(), the second step of joining: every rank checks in, and one that never comes is named.
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "common/basics/errors.h"
#include "common/group/process_group.h"
#include "common/group/roll_call_errors.h"

namespace ddp {

// Note [Roll call]
// Gloo's constructor waits for every rank, but when one never comes it only says "Socket
// Timeout", long after the fact and without a name. So before building the backend every rank
// checks in through the store under its own key (rollcall/rank/<r>) and then polls until all
// keys exist. At the deadline, the missing keys are the missing ranks. The same keys catch two
// processes that claim one rank (the counter reaches 2), and the first rank to arrive records
// the world size so that a process started with another one is refused. Whoever detects such a
// conflict writes rollcall/abort, so that every other rank stops too instead of waiting.
// Those refusals and a store of another user (Note [One user's store]) are in roll_call_errors.cpp.
void roll_call(c10d::Store& store, const RankInfo& info) {
  const auto deadline = std::chrono::steady_clock::now() + info.timeout();
  std::vector<std::string> everyone;  // rollcall/rank/0 ... rollcall/rank/<n-1>
  for (int r = 0; r < info.world_size.value; ++r) everyone.push_back(roll_call_key(r));
  try {
    refuse_a_strangers_store(store, info, deadline);  // a server shared by many users
    store.add("rollcall/arrived", 1);                 // processes, not ranks: two may claim one rank
    refuse_disagreements(store, info);                // another world size or backend stops everyone
    // Check in: add() counts atomically in the store, so a 2 means another process has this rank.
    if (store.add(roll_call_key(info.rank.value), 1) > 1) refuse_double_claim(store, info);
    while (true) {  // wait for the others: all checked in, or one stopped the roll call, or the deadline
      stop_if_another_rank_stopped(store, info);
      if (store.check(everyone)) return;
      if (std::chrono::steady_clock::now() > deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    // The deadline passed: the keys still missing name the ranks that never came (stops everyone).
    stop_naming_the_missing(store, info);
  } catch (const UsageError&) {
    throw;
  } catch (const JoinError&) {
    throw;
  } catch (const std::exception& e) {  // the store itself went away mid-way
    throw lost_the_store(info, e);
  }
}

}  // namespace ddp
