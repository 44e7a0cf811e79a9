// defines: the models of the trainer, an MLP and a small CNN (and variants), for 28x28 grey images.
#pragma once
#include <torch/torch.h>

#include <functional>
#include <string>

#include "common/basics/errors.h"

namespace ddp {

// How a model's BatchNorm layer normalises `x`: plain (the module's own forward, the default) or
// synchronised across ranks (sync_batch_norm.h). The layer's parameters and buffers stay in `bn`.
using Normalise = std::function<torch::Tensor(torch::nn::BatchNorm2d& bn, const torch::Tensor& x)>;

// 784 -> 512 -> 256 -> 10. Parameters in definition order: fc1, fc2, fc3 (the Python
// reference builds the same modules in the same order).
struct MlpImpl : torch::nn::Module {
  MlpImpl() {
    // One layer per statement: the seed then gives each layer the same numbers as in Python.
    fc1 = register_module("fc1", torch::nn::Linear(784, 512));
    fc2 = register_module("fc2", torch::nn::Linear(512, 256));
    fc3 = register_module("fc3", torch::nn::Linear(256, 10));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(fc1->forward(x.flatten(1)));
    x = torch::relu(fc2->forward(x));
    return fc3->forward(x);
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
};
TORCH_MODULE(Mlp);

// conv 3x3 (32) -> pool -> conv 3x3 (64) -> pool -> 3136 -> 256 -> 10: 0.82 M parameters,
// 3.15 MiB of gradients, so the default buckets split it in two (see Note [Buckets]).
struct CnnImpl : torch::nn::Module {
  CnnImpl() {
    conv1 = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3).padding(1)));
    conv2 = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3).padding(1)));
    fc1 = register_module("fc1", torch::nn::Linear(64 * 7 * 7, 256));
    fc2 = register_module("fc2", torch::nn::Linear(256, 10));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv1->forward(x)), 2);
    x = torch::max_pool2d(torch::relu(conv2->forward(x)), 2);
    x = torch::relu(fc1->forward(x.flatten(1)));
    return fc2->forward(x);
  }
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Cnn);

// The CNN with batch normalisation after each convolution: the course's model with buffers
// (running mean and variance, a batch counter) that are not parameters and get no gradient.
// DDP keeps them alike on every rank by broadcasting rank 0's: Note [Buffers]. With --sync-bn,
// `norm` computes the batch statistics over all ranks: Note [SyncBatchNorm].
struct CnnBnImpl : torch::nn::Module {
  explicit CnnBnImpl(Normalise n = nullptr) : norm(n ? std::move(n) : [](torch::nn::BatchNorm2d& bn, const torch::Tensor& x) {
    return bn->forward(x);
  }) {
    conv1 = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3).padding(1)));
    bn1 = register_module("bn1", torch::nn::BatchNorm2d(32));
    conv2 = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3).padding(1)));
    bn2 = register_module("bn2", torch::nn::BatchNorm2d(64));
    fc1 = register_module("fc1", torch::nn::Linear(64 * 7 * 7, 256));
    fc2 = register_module("fc2", torch::nn::Linear(256, 10));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(norm(bn1, conv1->forward(x))), 2);
    x = torch::max_pool2d(torch::relu(norm(bn2, conv2->forward(x))), 2);
    x = torch::relu(fc1->forward(x.flatten(1)));
    return fc2->forward(x);
  }
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  Normalise norm;
};
TORCH_MODULE(CnnBn);

// The MLP with a second head that forward() uses on some batches only: when the batch's first
// image is bright at its centre. A branch taken by data (a router, an optional head, a model
// whose forward depends on its input) leaves its parameters without a gradient on the steps it
// is skipped, on some ranks or on all. Our DDP, like PyTorch's, then fails unless told to look
// for such parameters: --find-unused-parameters (Note [Unused parameters] in beyond/unused_parameters.cpp).
struct MlpBranchImpl : torch::nn::Module {
  MlpBranchImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(784, 512));
    fc2 = register_module("fc2", torch::nn::Linear(512, 256));
    fc3 = register_module("fc3", torch::nn::Linear(256, 10));
    aux = register_module("aux", torch::nn::Linear(256, 10));
  }
  torch::Tensor forward(torch::Tensor x) {
    // One pixel, no sum: the same decision in C++ and in Python, bit for bit.
    const bool branch = x.index({0, 0, 14, 14}).item<float>() > 0;
    x = torch::relu(fc1->forward(x.flatten(1)));
    x = torch::relu(fc2->forward(x));
    return branch ? fc3->forward(x) + aux->forward(x) : fc3->forward(x);
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr}, aux{nullptr};
};
TORCH_MODULE(MlpBranch);

// A model by name ("mlp", "mlp_branch", "cnn" or "cnn_bn"), initialised from `seed`, with forward() reachable
// through the returned function (LibTorch modules have no common virtual forward). `norm`, if
// given, is how its BatchNorm layers normalise; a model without BatchNorm refuses it.
struct AnyModel {
  std::shared_ptr<torch::nn::Module> module;
  std::function<torch::Tensor(const torch::Tensor&)> forward;
};
inline AnyModel make_model(const std::string& name, uint64_t seed, Normalise norm = nullptr) {
  if (norm && name != "cnn_bn") throw UsageError("--sync-bn: --model " + name + " has no BatchNorm to synchronise (--model cnn_bn has)");
  torch::manual_seed(seed);
  if (name == "cnn") {
    Cnn m;
    return {m.ptr(), [m](const torch::Tensor& x) mutable { return m->forward(x); }};
  }
  if (name == "cnn_bn") {
    CnnBn m(std::move(norm));
    return {m.ptr(), [m](const torch::Tensor& x) mutable { return m->forward(x); }};
  }
  if (name == "mlp_branch") {
    MlpBranch m;
    return {m.ptr(), [m](const torch::Tensor& x) mutable { return m->forward(x); }};
  }
  Mlp m;
  return {m.ptr(), [m](const torch::Tensor& x) mutable { return m->forward(x); }};
}

}  // namespace ddp
