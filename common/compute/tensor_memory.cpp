// provides: TensorMemory, the counting CPU allocator (Note [A memory limit on a CPU]).
#include "common/compute/tensor_memory.h"

#include <c10/core/CPUAllocator.h>
#include <torch/version.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <new>
#include <stdexcept>
#include <unordered_map>

#include "common/basics/errors.h"

namespace ddp {
namespace {

std::atomic<int64_t> g_held{0}, g_peak{0}, g_limit{0};  // bytes; limit 0: none
std::atomic<bool> g_started{false};

// Its memory is the base allocator's raw memory, the pointer its own context, and raw_deleter()
// says how to free it: some kernels (oneDNN's convolutions) allocate raw through the CPU
// allocator and insist on that. The size of each block is kept in a table to count its freeing.
std::mutex g_sizes_mutex;
std::unordered_map<void*, int64_t>* g_sizes = new std::unordered_map<void*, int64_t>();  // never freed: see start()
c10::DeleterFnPtr g_base_free = nullptr;

void release(void* data) {
  if (data != nullptr) {
    std::lock_guard<std::mutex> lock(g_sizes_mutex);
    auto it = g_sizes->find(data);
    if (it != g_sizes->end()) {
      g_held.fetch_sub(it->second);
      g_sizes->erase(it);
    }
  }
  g_base_free(data);
}

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
    void* data = base_->raw_allocate(n);
    if (data != nullptr) {
      std::lock_guard<std::mutex> lock(g_sizes_mutex);
      (*g_sizes)[data] = bytes;
    } else {
      g_held.fetch_sub(bytes);
    }
    return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }

#if TORCH_VERSION_MAJOR >= 2
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
#endif

 private:
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
    c10::Allocator* base = c10::GetCPUAllocator();
    g_base_free = base->raw_deleter();
    if (g_base_free == nullptr) throw std::logic_error("the CPU allocator frees no raw memory: it cannot be counted");
    static CountingAllocator* counting = new CountingAllocator(base);
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

std::string TensorMemory::peak_line() {
  const auto limit = limit_mib();
  return "memory: peak of the tensors training allocated " + mib(static_cast<double>(peak_bytes())) +
         (limit ? " (--memory-limit-mb " + mib(*limit * 1024 * 1024) + ")" : std::string(" (no --memory-limit-mb)"));
}

}  // namespace ddp
