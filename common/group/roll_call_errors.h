// defines: the roll call's refusals, beside its lesson (common/group/roll_call.cpp): a store of
// another user, ranks that disagree or claim one rank twice, ranks that never came, a lost store.
#pragma once
#include <chrono>
#include <string>

#include "common/basics/errors.h"
#include "common/group/compat.h"
#include "common/launch/rank_env.h"

namespace ddp {

// The key rank r checks in under: "rollcall/rank/<r>".
std::string roll_call_key(int rank);

// Note [One user's store]: rank 0 records its user; another rank waits for that record (until
// `deadline`) and throws UsageError if the store belongs to someone else.
void refuse_a_strangers_store(c10d::Store& store, const RankInfo& info,
                              std::chrono::steady_clock::time_point deadline);

// The first rank to arrive records its world size and backend; a rank with others stops
// everyone (UsageError here, and for the others through rollcall/abort).
void refuse_disagreements(c10d::Store& store, const RankInfo& info);

// This rank was claimed by another process too: stops everyone (UsageError).
[[noreturn]] void refuse_double_claim(c10d::Store& store, const RankInfo& info);

// Throws what another rank wrote to rollcall/abort, if it did; else returns.
void stop_if_another_rank_stopped(c10d::Store& store, const RankInfo& info);

// At the deadline: names the ranks whose keys are missing and stops everyone (JoinError).
// Returns when none is missing (the last one arrived just now).
void stop_naming_the_missing(c10d::Store& store, const RankInfo& info);

// The error for a store that went away during the roll call: its host has exited.
JoinError lost_the_store(const RankInfo& info, const std::exception& e);

}  // namespace ddp
