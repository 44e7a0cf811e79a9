// provides: the collective count of Note [Counted by the backend].
#include "common/group/collective_count.h"

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <utility>

#include "common/basics/failure.h"
#include "common/basics/log.h"

namespace ddp {
namespace {

// Read while the program's statics are made, before its main() can change the environment.
const bool kCountAsked = [] {
  const char* count = std::getenv("DDP_COUNT_COLLECTIVES");
  return count && std::string(count) == "1";
}();

int64_t bytes_of(const std::vector<at::Tensor>& tensors) {
  int64_t n = 0;
  for (const at::Tensor& t : tensors) n += t.numel() * t.element_size();
  return n;
}

// Gloo, with what the chapters call on it counted before Gloo runs it.
class CountedGloo : public c10d::ProcessGroupGloo {
 public:
  using c10d::ProcessGroupGloo::ProcessGroupGloo;
  using WorkPtr = decltype(std::declval<c10d::ProcessGroupGloo&>().allreduce(std::declval<std::vector<at::Tensor>&>()));

  WorkPtr allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override {
    allreduces++;
    allreduce_bytes += bytes_of(tensors);
    return c10d::ProcessGroupGloo::allreduce(tensors, opts);
  }
  WorkPtr broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts = c10d::BroadcastOptions()) override {
    broadcasts++;
    if (opts.rootRank == getRank() && opts.rootTensor >= 0 && opts.rootTensor < static_cast<int64_t>(tensors.size())) {
      note_sent(tensors[opts.rootTensor]);
    }
    return c10d::ProcessGroupGloo::broadcast(tensors, opts);
  }
  WorkPtr send(std::vector<at::Tensor>& tensors, int dst, int tag) override {
    sends++;
    send_bytes += bytes_of(tensors);
    return c10d::ProcessGroupGloo::send(tensors, dst, tag);
  }
  WorkPtr recv(std::vector<at::Tensor>& tensors, int src, int tag) override {
    recvs++;
    return c10d::ProcessGroupGloo::recv(tensors, src, tag);
  }
  WorkPtr recvAnysource(std::vector<at::Tensor>& tensors, int tag) override {
    recvs++;
    return c10d::ProcessGroupGloo::recvAnysource(tensors, tag);
  }

  std::atomic<int64_t> allreduces{0}, allreduce_bytes{0}, broadcasts{0}, sends{0}, send_bytes{0}, recvs{0};

  // What this rank sent as the root of its broadcasts: a tensor's values up to four of them
  // (an integer without decimals), else its size; what a check compares with the number that
  // had to travel (exercise 01.2), so that a broadcast of a placeholder beside another route fails.
  std::string sent() const {
    std::lock_guard<std::mutex> lock(mu_);
    return sent_;
  }

 private:
  void note_sent(const at::Tensor& t) {
    std::string values;
    if (t.numel() <= 4) {
      const at::Tensor d = t.detach().to(at::kCPU).to(at::kDouble).contiguous();
      for (int64_t i = 0; i < d.numel(); ++i) {
        const double v = d.data_ptr<double>()[i];
        char text[40];
        if (v == std::floor(v) && std::fabs(v) < 1e15) std::snprintf(text, sizeof(text), "%lld", static_cast<long long>(v));
        else std::snprintf(text, sizeof(text), "%.17g", v);
        values += (i ? " " : "") + std::string(text);
      }
    } else {
      values = std::to_string(t.numel()) + " values";
    }
    std::lock_guard<std::mutex> lock(mu_);
    sent_ += (sent_.empty() ? "" : "; ") + values;
  }
  mutable std::mutex mu_;
  std::string sent_;
};

}  // namespace

c10::intrusive_ptr<Backend> make_gloo(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                      const c10::intrusive_ptr<c10d::ProcessGroupGloo::Options>& opts) {
  if (kCountAsked) return c10::make_intrusive<CountedGloo>(store, rank, size, opts);
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, opts);
}

void count_collectives_if_asked(Group& g) {
  if (!kCountAsked) return;
  g.pg->setSequenceNumberForGroup();
  g.sequence_at_join = g.pg->getSequenceNumberForGroup();
}

void report_collective_count(const Group& g) noexcept {
  if (!g.pg || !g.sequence_at_join || std::uncaught_exceptions() > 0) return;
  try {
    const auto* counted = dynamic_cast<const CountedGloo*>(g.pg.get());
    std::string line = "the process group ran " +
                       std::to_string(g.pg->getSequenceNumberForGroup() - *g.sequence_at_join) + " collectives";
    if (counted) {
      line += ": " + std::to_string(counted->allreduces.load()) + " all-reduces of " +
              std::to_string(counted->allreduce_bytes.load()) + " bytes in all, " + std::to_string(counted->sends.load()) +
              " sends, " + std::to_string(counted->recvs.load()) + " receives, " + std::to_string(counted->broadcasts.load()) +
              " broadcasts";
    }
    log(line + " (DDP_COUNT_COLLECTIVES)");
    if (counted && counted->sends.load() > 0) {
      log("its sends carried " + std::to_string(counted->send_bytes.load()) + " bytes in all (DDP_COUNT_COLLECTIVES)");
    }
    if (counted && !counted->sent().empty()) {
      log("as the root of its broadcasts this rank sent: " + counted->sent() + " (DDP_COUNT_COLLECTIVES)");
    }
  } catch (const std::exception& e) {
    log("DDP_COUNT_COLLECTIVES: " + short_what(e));
  }
}

}  // namespace ddp
