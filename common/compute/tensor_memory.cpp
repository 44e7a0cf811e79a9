// provides: TensorMemory, the counting CPU allocator (Note [A memory limit on a CPU]).
#include "common/compute/tensor_memory.h"

#include <c10/core/CPUAllocator.h>
#include <torch/version.h>

#include <atomic>
#include <cstdio>
#include <new>

#include "common/basics/errors.h"

namespace ddp {
namespace {

std::atomic<int64_t> g_held{0}, g_peak{0}, g_limit{0};  // bytes; limit 0: none
std::atomic<bool> g_started{false};

class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base) {}

#if TORCH_VERSION_MAJOR >= 2
  c10::DataPtr allocate(size_t n) override {
#else
  c10::DataPtr allocate(size_t n) const override {
#endif
    const int64_t bytes = static_cast<int64_t>(n);
    const int64_t now = g_held.fetch_add(bytes) + bytes;
    const int64_t limit = g_limit.load();
    if (limit > 0 && now > limit) {
      g_held.fetch_sub(bytes);
      // What CUDA's allocator says, in its words, so that a learner recognises it.
      throw std::runtime_error("out of memory (--memory-limit-mb " + mib(static_cast<double>(limit)) + "): tried to allocate " +
                               mib(static_cast<double>(bytes)) + " with " + mib(static_cast<double>(now - bytes)) +
                               " of tensors already held (Note [A memory limit on a CPU])");
    }
    int64_t peak = g_peak.load();
    while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
    }
    auto* held = new Held{base_->allocate(n), bytes};
    void* data = held->inner.get();
    const c10::Device device = held->inner.device();
    return {data, held, &release, device};
  }

#if TORCH_VERSION_MAJOR >= 2
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
#endif

 private:
  struct Held {
    c10::DataPtr inner;  // the base allocator's memory, freed with it
    int64_t bytes;
  };
  static void release(void* context) {
    auto* held = static_cast<Held*>(context);
    g_held.fetch_sub(held->bytes);
    delete held;
  }
  c10::Allocator* base_;
};

}  // namespace

std::string mib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f MiB", bytes / (1024.0 * 1024.0));
  return buf;
}

void TensorMemory::start(std::optional<double> limit) {
  g_limit = limit ? static_cast<int64_t>(*limit * 1024 * 1024) : 0;
  if (!g_started.exchange(true)) {
    // Never freed: every tensor it allocated calls back into it when freed, to the process's end.
    static CountingAllocator* counting = new CountingAllocator(c10::GetCPUAllocator());
    c10::SetCPUAllocator(counting, /*priority=*/1);
  }
  reset_peak();
}

bool TensorMemory::started() { return g_started; }
int64_t TensorMemory::held_bytes() { return g_held; }
int64_t TensorMemory::peak_bytes() { return g_peak; }
void TensorMemory::reset_peak() { g_peak = g_held.load(); }
std::optional<double> TensorMemory::limit_mib() {
  const int64_t l = g_limit;
  return l > 0 ? std::optional<double>(static_cast<double>(l) / (1024.0 * 1024.0)) : std::nullopt;
}

}  // namespace ddp
