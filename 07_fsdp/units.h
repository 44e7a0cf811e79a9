// defines: units_of(): the course's models cut into FSDP units, one per layer, each with the
// part of the model's forward that belongs to it.
#pragma once
#include "05_ddp/models.h"
#include "07_fsdp/fsdp.h"

namespace ch07 {

// Each unit computes its layer and what follows it up to the next layer (activation, pooling),
// op for op as the model's own forward() (05_ddp/models.h): the same numbers, so the same
// fingerprints. PyTorch's reference wraps the same layers: fully_shard(model.fc1), ...
inline std::vector<UnitSpec> units_of(const std::string& name, const ddp::AnyModel& model) {
  auto linear = [&](const char* n) { return model.module->named_children()[n]->as<torch::nn::Linear>(); };
  auto conv = [&](const char* n) { return model.module->named_children()[n]->as<torch::nn::Conv2d>(); };
  auto unit = [&](const char* n, std::function<torch::Tensor(const torch::Tensor&)> f) {
    return UnitSpec{n, model.module->named_children()[n], std::move(f)};
  };
  if (name == "mlp") {
    auto fc1 = linear("fc1"), fc2 = linear("fc2"), fc3 = linear("fc3");
    return {unit("fc1", [fc1](const torch::Tensor& x) { return torch::relu(fc1->forward(x.flatten(1))); }),
            unit("fc2", [fc2](const torch::Tensor& x) { return torch::relu(fc2->forward(x)); }),
            unit("fc3", [fc3](const torch::Tensor& x) { return fc3->forward(x); })};
  }
  if (name == "cnn") {
    auto conv1 = conv("conv1"), conv2 = conv("conv2");
    auto fc1 = linear("fc1"), fc2 = linear("fc2");
    return {unit("conv1", [conv1](const torch::Tensor& x) { return torch::max_pool2d(torch::relu(conv1->forward(x)), 2); }),
            unit("conv2", [conv2](const torch::Tensor& x) { return torch::max_pool2d(torch::relu(conv2->forward(x)), 2); }),
            unit("fc1", [fc1](const torch::Tensor& x) { return torch::relu(fc1->forward(x.flatten(1))); }),
            unit("fc2", [fc2](const torch::Tensor& x) { return fc2->forward(x); })};
  }
  throw ddp::UsageError("--model " + name + ": 07_fsdp shards mlp and cnn (the BatchNorm and branch variants are 05's)");
}

}  // namespace ch07
