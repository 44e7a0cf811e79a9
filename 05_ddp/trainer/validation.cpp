// provides: evaluate(). See Note [Exact distributed validation].
#include "05_ddp/trainer/validation.h"

#include <algorithm>
#include <vector>

#include "common/data/sampler.h"
#include "common/observe/flight_recorder.h"

namespace ddp {

Evaluation evaluate(const AnyModel& model, DistributedDataParallel& ddp_model, const Dataset& test, Group& group, int batch,
                    const torch::Device& device) {
  ddp_model.sync_buffers();
  return evaluate(model, test, group, batch, device);
}

Evaluation evaluate(const AnyModel& model, const Dataset& test, Group& group, int batch, const torch::Device& device) {
  torch::NoGradGuard no_grad;
  model.module->eval();
  DistributedSampler sampler(test.size(), group.rank(), group.size(), /*shuffle=*/false);
  const std::vector<int64_t> idx = sampler.indices();
  auto sums = torch::zeros({3}, torch::kFloat64);  // loss sum, correct, images
  for (size_t at = 0; at < idx.size(); at += batch) {
    std::vector<int64_t> ids;
    for (size_t k = at; k < std::min(idx.size(), at + batch); ++k) {
      if (!sampler.is_padding(static_cast<int64_t>(k))) ids.push_back(idx[k]);
    }
    if (ids.empty()) continue;
    auto sel = torch::tensor(ids, torch::kInt64);
    auto logits = model.forward(test.images.index_select(0, sel).to(device));
    auto labels = test.labels.index_select(0, sel).to(device);
    auto losses = torch::nn::functional::cross_entropy(logits, labels, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
    sums[0] += losses.to(torch::kFloat64).sum().cpu();
    sums[1] += logits.argmax(1).eq(labels).sum().cpu().to(torch::kFloat64);
    sums[2] += static_cast<double>(ids.size());
  }
  std::vector<torch::Tensor> t{sums.to(device)};
  run(group, "all-reduce", "validation", 3 * 8, [&] { return group.pg->allreduce(t); });
  model.module->train();
  auto s = t[0].cpu();
  return {s[0].item<double>() / s[2].item<double>(), s[1].item<double>() / s[2].item<double>(), s[2].item<int64_t>()};
}

}  // namespace ddp
