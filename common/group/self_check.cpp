// provides: check_sum_of_ranks(), chapter 01's self-check, for the chapters after it.
#include "common/group/self_check.h"

#include "common/basics/failure.h"
#include "common/observe/flight_recorder.h"
#include "common/basics/log.h"

namespace ddp {

void check_sum_of_ranks(Group& g) {
  const int world = g.size();
  std::vector<torch::Tensor> t{torch::full({1}, g.rank(), torch::TensorOptions(torch::kFloat64).device(device_for(g.info)))};
  run(g, "all-reduce", "sum-of-ranks", 8, [&] { return g.pg->allreduce(t); });  // recorded when g has a flight recorder
  const double got = t[0].item<double>(), want = world * (world - 1) / 2.0;
  log("check: all-reduce(SUM) of the ranks = " + std::to_string(static_cast<long long>(got)) +
      ", n(n-1)/2 = " + std::to_string(static_cast<long long>(want)) + (got == want ? ": OK" : ": WRONG"));
  DDP_CHECK(got == want, "all-reduce returned " << got << ", expected " << want);
  // A rank whose check failed throws before the barrier, so the barrier fails for the
  // others too: past it, rank 0 may speak for everyone.
  run(g, "barrier", "after-check", 0, [&] { return g.pg->barrier(); });
  log0("all " + std::to_string(world) + " ranks passed the check");
}

}  // namespace ddp
