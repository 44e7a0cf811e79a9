// defines: TensorMemory, this process's CPU tensors counted as they are allocated and freed: the
// bytes held now, the peak, and a limit past which an allocation fails, as a full GPU's does.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace ddp {

// Note [A memory limit on a CPU]
// On a GPU a model that does not fit fails at its first allocation past the device's memory
// ("CUDA out of memory. Tried to allocate ..."). A CPU has no such edge: the kernel lends
// virtual memory, swaps, and at last kills the process, and a ulimit on the address space
// counts LibTorch's and Gloo's own mappings (gigabytes) rather than the tensors. So the course
// draws the edge itself: LibTorch allocates every CPU tensor through one allocator
// (c10::GetCPUAllocator()), and TensorMemory puts itself in front of it. From then on it counts
// each tensor's bytes as they are allocated and freed, remembers the peak, and with a limit
// refuses an allocation that would pass it, naming the sizes, as CUDA's allocator does. What
// was allocated before it started (the data set, loaded first) is not counted: the limit is on
// what training adds, the model's parameters, gradients, optimizer state, activations and the
// collectives' buffers. Tensors a GPU holds are not counted (a GPU has its own limit).
class TensorMemory {
 public:
  // Starts counting (once per process; a later call only sets the limit and restarts the peak).
  // `limit_mib`: refuse an allocation that would hold more; none: count only.
  static void start(std::optional<double> limit_mib);
  static bool started();
  static int64_t held_bytes();  // now
  static int64_t peak_bytes();  // since start() or reset_peak()
  static void reset_peak();
  static std::optional<double> limit_mib();
  // "memory: peak of the tensors training allocated 5.98 MiB (--memory-limit-mb 10.00 MiB)": the
  // line 05 and 07 print on every rank.
  static std::string peak_line();
};

// "12.34 MiB"
std::string mib(double bytes);

}  // namespace ddp
