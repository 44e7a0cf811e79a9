// provides: OverlapShare, an observer of the DDP class's backwards.
#include "05_ddp/beyond/overlap.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "common/observe/trace.h"

namespace ddp {

// Note [Overlap share]
// For each synchronising backward: the time some bucket's all-reduce was in flight (the union
// of [start, end] over the buckets: Gloo may run two at once), and the part of it before
// finish_backward(), that is, while autograd was still computing gradients. Their ratio, over
// every backward but the first (it rebuilds the buckets), is the share of communication hidden
// behind backward. The end of an all-reduce is when the backend completed it (a callback on
// its future, common/observe/flight_recorder.cpp), not when we waited for it.
void OverlapShare::watch(DistributedDataParallel& ddp) {
  ddp.observe_backward([this](const DistributedDataParallel& d, double computed_us) {
    if (!d.rebuilt()) return;  // the first backward: one bucket, nothing to overlap
    std::vector<std::pair<double, double>> spans;
    for (const auto& b : d.buckets()) {
      const Pending& p = b.reduction.work;
      if (!p.work) continue;  // a bucket whose collective was not started (--skip-rank)
      const double end = p.done_us->load();
      spans.emplace_back(p.issued_us, end > 0 ? end : wall_us());
    }
    std::sort(spans.begin(), spans.end());
    double comm = 0, hidden = 0, from = 0, to = -1;  // the union, one merged interval at a time
    auto close = [&] {
      if (to <= from) return;
      comm += to - from;
      hidden += std::max(0.0, std::min(to, computed_us) - from);
    };
    for (const auto& [s, e] : spans) {
      if (s > to) close(), from = s, to = e;
      else to = std::max(to, e);
    }
    close();
    comm_us += comm, hidden_us += hidden, ++backwards;
  });
}

}  // namespace ddp
