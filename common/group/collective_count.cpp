// provides: the collective count of Note [Counted by the backend].
#include "common/group/collective_count.h"

#include <cstdlib>
#include <exception>
#include <string>

#include "common/basics/failure.h"
#include "common/basics/log.h"

namespace ddp {

void count_collectives_if_asked(Group& g) {
  const char* count = std::getenv("DDP_COUNT_COLLECTIVES");
  if (!count || std::string(count) != "1") return;
  g.pg->setSequenceNumberForGroup();
  g.sequence_at_join = g.pg->getSequenceNumberForGroup();
}

void report_collective_count(const Group& g) noexcept {
  if (!g.pg || !g.sequence_at_join || std::uncaught_exceptions() > 0) return;
  try {
    log("the process group ran " + std::to_string(g.pg->getSequenceNumberForGroup() - *g.sequence_at_join) +
        " collectives (DDP_COUNT_COLLECTIVES)");
  } catch (const std::exception& e) {
    log("DDP_COUNT_COLLECTIVES: " + short_what(e));
  }
}

}  // namespace ddp
