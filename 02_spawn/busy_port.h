// defines: refuse_busy_port(): a store port given by hand (--master-port, MASTER_PORT) checked
// before 02_spawn forks anything. See Note [A port given by hand].
#pragma once
#include "common/launch/rank_env.h"

namespace spawn {

// Throws UsageError naming the port, where it came from, and the fix, when the launcher could
// not listen on base.master_port (another process listens there, or it is privileged).
void refuse_busy_port(const ddp::RankInfo& base);

}  // namespace spawn
