// provides: 07's flags and what it refuses of 05's.
#include "07_fsdp/fsdp_flags.h"

#include <torch/version.h>

#include <map>
#include <string>

#include "common/basics/errors.h"

namespace ch07 {

void add_fsdp_flags(CLI::App& app, FsdpFlags& f) {
  app.add_option("--prefetch", f.prefetch,
                 "Issue the all-gathers of this many units ahead (0: each when its unit is reached; Note [Prefetch])")
      ->check(CLI::Range(0, 8));
  std::map<std::string, Collectives> kinds{
      {"ring", Collectives::kRing}, {"gloo-order", Collectives::kRingInGlooOrder}, {"c10d", Collectives::kC10d}};
  app.add_option("--collectives", f.collectives,
                 "ring: chapter 03's ring cut in its two halves (ring_halves.h); gloo-order: the same, the reduce-scatter "
                 "summing in PyTorch's Gloo's order (Note [Summing in Gloo's order]); c10d: the process group's "
                 "all_gather_into_tensor and reduce_scatter_tensor (LibTorch 2.x)")
      ->transform(CLI::CheckedTransformer(kinds, CLI::ignore_case));
}

void refuse_what_07_does_not_do(const CLI::App& app, const FsdpFlags& f) {
  static const char* const kDdpOnly[] = {
      "--sync-bn", "--bucket-cap-mb", "--one-bucket", "--find-unused-parameters", "--uneven-shards", "--join",
      "--divide-by-live-ranks", "--gradient-as-bucket-view", "--zero", "--comm-hook", "--powersgd-rank",
      "--powersgd-start-iter", "--amp", "--eval-only", "--skip-rank", "--skip-at-step", "--record-samples", "--trace", "--requeue-signal", "--drill-after",
      "--drill-at-step"};
  for (const char* name : kDdpOnly) {
    if (app.count(name) > 0) {
      throw ddp::UsageError(std::string(name) + ": a flag of 05_ddp's trainer that 07_fsdp does not take (07 is 05's trainer "
                            "with FSDP in place of the DDP class and without its extras: run 05_ddp for it)");
    }
  }
#if TORCH_VERSION_MAJOR < 2
  if (f.collectives == Collectives::kC10d) {
    throw ddp::UsageError("--collectives c10d: LibTorch " TORCH_VERSION "'s Gloo has neither reduce-scatter nor all-gather into "
                          "one tensor; --collectives ring (the default) runs both as the ring's halves");
  }
#else
  (void)f;
#endif
}

std::string describe(Collectives c) {
  if (c == Collectives::kRing) return "the ring's two halves";
  if (c == Collectives::kRingInGlooOrder) return "the ring's two halves, summed in Gloo's order";
  return "c10d's all-gather and reduce-scatter";
}

}  // namespace ch07
