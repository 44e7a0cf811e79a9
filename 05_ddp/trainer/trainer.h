// defines: the trainer's plumbing: the data by flag, the learning-rate schedule and the
// optimizer by flag.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "05_ddp/trainer/options.h"
#include "common/data/fashion_mnist.h"
#include "common/basics/cli.h"
#include "common/group/process_group.h"

namespace ddp {

// The training and test sets: Fashion-MNIST from --data-dir, or --synthetic images; the first
// --train-samples / --test-samples of them when given.
std::pair<Dataset, Dataset> load_datasets(const TrainerOptions& o);

// Note [Warm-up and cosine]
// The learning rate climbs linearly for the first --warmup-steps (large steps on random weights
// make the loss jump), then falls along half a cosine to 0 at the last step.
double learning_rate(const TrainerOptions& o, int64_t step, int64_t total);

// The loss of a batch of images and their labels (main.cpp's: the cross entropy of the model's
// logits; --amp puts autocast around it).
using LossFn = std::function<torch::Tensor(const torch::Tensor& images, const torch::Tensor& labels)>;

// SGD with momentum, or AdamW, as --optimizer says, over the parameters it is given (ZeRO,
// going_further/zero.md, builds one over each rank's share).
using OptimizerFactory = std::function<std::unique_ptr<torch::optim::Optimizer>(const std::vector<torch::Tensor>&)>;
OptimizerFactory optimizer_factory(const TrainerOptions& o);

// optimizer.zero_grad() as Python's of the same version does it: 2.x sets each .grad() to None,
// 1.13 zeroes it in place. LibTorch's own C++ zero_grad() first calls .grad().detach_(), which a
// .grad() that is a view into a DDP bucket refuses (--gradient-as-bucket-view: Note [Gradients as
// bucket views]); Python's detaches only a .grad() that has a grad_fn. Same arithmetic.
void zero_grad(torch::optim::Optimizer& optimizer);

int64_t count_parameters(const std::vector<torch::Tensor>& params);

}  // namespace ddp
