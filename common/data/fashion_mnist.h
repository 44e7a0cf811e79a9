// defines: Fashion-MNIST read from its gzipped IDX files (zlib), and a synthetic stand-in.
#pragma once
#include <torch/torch.h>

#include <optional>
#include <string>

namespace ddp {

// Where Debian's dataset-fashion-mnist package puts the four files.
constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

struct Dataset {
  torch::Tensor images;  // [N, 1, 28, 28] float32, normalised with the training set's mean and std
  torch::Tensor labels;  // [N] int64, classes 0-9
  std::string source;    // for the log: the files, or "synthetic"
  int64_t size() const { return labels.size(0); }
};

// The training (60,000) or test (10,000) split from `dir`; with `limit`, its first `limit`
// samples, as first_n would keep them. A missing or truncated file, one that is not the IDX
// layout expected, or a corrupt one, throws UsageError naming the file; with a limit, a corrupt
// byte past the samples kept is left to a run that reads that far (Note [Reading only the
// samples a run uses] in fashion_mnist.cpp).
Dataset load_fashion_mnist(const std::string& dir, bool train, std::optional<int64_t> limit = std::nullopt);

// The raw bytes of one IDX file (gzipped or not), checked: magic, rank, dimensions and length.
// Returns the whole file's dimensions; `data` receives the payload, or with `first` only its
// first `first` items (along dimension 0). Exposed for the tests.
std::vector<int64_t> read_idx(const std::string& path, int expected_dims, std::string& data,
                              std::optional<int64_t> first = std::nullopt);

// A learnable stand-in of the same shape, for machines without the data: each class is a
// fixed random pattern plus noise. Deterministic in (seed, train), so every rank agrees.
Dataset synthetic_dataset(int64_t n, bool train);

// The first n samples (all of them if n is larger): quick runs on a part of the data.
Dataset first_n(const Dataset& d, int64_t n);

// Pixel bytes -> float32, normalised as the tests' Python reference does, op for op.
torch::Tensor normalise_pixels(const torch::Tensor& bytes);

}  // namespace ddp
