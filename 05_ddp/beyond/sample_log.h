// defines: SampleLog: --record-samples, which dataset images each rank saw at each step
// (Note [Which images each rank saw]).
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace ddp {

// Note [Which images each rank saw]
// The claims of this chapter about data (the sampler gives each rank a disjoint share; a run
// resumed at another world size meets the same images at the same step) are claims about
// indices, so they can be checked from indices: with --record-samples <path> each rank appends
// one line per micro-batch, "step i1 i2 ...", to <path>.rank<r>, flushed at once so that a rank
// killed on purpose keeps what it recorded; a resumed run continues the file. The step counts
// from 1, as the progress lines, checkpoints and --kill-at-step do. The tests read these files
// back (tests/test_trainer.cpp).
class SampleLog {
 public:
  // Off with "". UsageError when the file cannot be opened.
  SampleLog(const std::string& path, int rank);
  ~SampleLog();
  SampleLog(const SampleLog&) = delete;
  SampleLog& operator=(const SampleLog&) = delete;
  // The micro-batch order[from, to) of the training loop's `step` (from 0), written as step + 1.
  void record(int64_t step, const std::vector<int64_t>& order, int64_t from, int64_t to);

 private:
  std::FILE* f_ = nullptr;
};

}  // namespace ddp
