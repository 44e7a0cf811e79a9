// provides: replay(), the single-process reference of a run with faults.
#include "08_fault_tolerance/launch.h"

namespace ch08 {

std::vector<torch::Tensor> replay(const std::vector<StepRecord>& schedule, const ddp::toy::TrainConfig& cfg) {
  auto model = ddp::toy::make_model(cfg.seed);
  std::vector<torch::Tensor> params = model->parameters();
  auto optimizer = ddp::toy::make_optimizer(params, cfg);
  for (const StepRecord& r : schedule) {
    std::vector<torch::Tensor> sum;
    const int64_t n = static_cast<int64_t>(r.contributors.size());
    for (int64_t j = 0; j < n; ++j) {
      auto [x, y] = ddp::toy::batch(static_cast<int>(r.position / r.batch + j), 0, static_cast<int>(r.batch), 1);
      std::vector<torch::Tensor> g = torch::autograd::grad({torch::mse_loss(model->forward(x), y)}, params);
      if (sum.empty()) sum = g;
      else for (size_t k = 0; k < g.size(); ++k) sum[k] = sum[k] + g[k];  // the contributors' order, as in the all-reduce
    }
    for (size_t k = 0; k < params.size(); ++k) params[k].mutable_grad() = sum[k].div_(n);
    optimizer->step();
  }
  return params;
}

}  // namespace ch08
