// provides: the Fashion-MNIST reader (gzipped IDX via zlib) and the synthetic dataset.
#include "common/data/fashion_mnist.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "common/basics/errors.h"

namespace ddp {
namespace {

// What a gzip file says it holds (its last 4 bytes, ISIZE, little-endian), for the reserve only:
// 0 if it cannot be read, and at most 64 times the file (a file that is not gzipped).
size_t gzip_size_hint(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  const std::streamoff file = in ? static_cast<std::streamoff>(in.tellg()) : 0;
  if (file < 18) return 0;
  unsigned char b[4];
  in.seekg(file - 4);
  if (!in.read(reinterpret_cast<char*>(b), 4)) return 0;
  const size_t isize = b[0] | b[1] << 8 | b[2] << 16 | static_cast<size_t>(b[3]) << 24;
  return std::min(isize, static_cast<size_t>(file) * 64);
}

std::string read_gzip(const std::string& path) {
  gzFile f = ::gzopen(path.c_str(), "rb");
  if (!f) {
    throw UsageError("cannot open " + path + ": " + std::strerror(errno) +
                     " (install dataset-fashion-mnist, point --data-dir at the files, or use --synthetic)");
  }
  std::string out;
  out.reserve(gzip_size_hint(path));  // 47 MB of training images grown by doubling: copied twice over
  char buf[1 << 16];
  int n;
  while ((n = ::gzread(f, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  int err = Z_OK;
  const std::string msg = ::gzerror(f, &err);
  ::gzclose(f);
  // A cut-off download ends in Z_BUF_ERROR ("unexpected end of file"), a flipped byte in
  // Z_DATA_ERROR (bad CRC or stream): either way the data cannot be trusted.
  if (n < 0 || (err != Z_OK && err != Z_STREAM_END)) {
    throw UsageError(path + ": corrupt or truncated gzip data (zlib: " + msg + "); download it again");
  }
  return out;
}

uint32_t big_endian(const std::string& s, size_t at) {
  auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(s[at + i])); };
  return b(0) << 24 | b(1) << 16 | b(2) << 8 | b(3);
}

}  // namespace

std::vector<int64_t> read_idx(const std::string& path, int expected_dims, std::string& data) {
  std::string raw = read_gzip(path);  // zlib reads a file that is not gzipped as it is
  const size_t header = 4 + 4 * static_cast<size_t>(expected_dims);
  if (raw.size() < header) throw UsageError(path + ": not an IDX file: only " + std::to_string(raw.size()) + " bytes");
  const uint32_t magic = big_endian(raw, 0);
  // IDX magic: two zero bytes, the element type (0x08 = unsigned byte), the number of dimensions.
  if (magic != (0x0800u | static_cast<uint32_t>(expected_dims))) {
    char hex[16];
    std::snprintf(hex, sizeof(hex), "0x%08x", magic);
    throw UsageError(path + ": not an IDX file of " + std::to_string(expected_dims) + "-dimensional bytes (magic " +
                     hex + ")");
  }
  std::vector<int64_t> dims;
  int64_t count = 1;
  for (int d = 0; d < expected_dims; ++d) dims.push_back(big_endian(raw, 4 + 4 * d)), count *= dims.back();
  if (raw.size() - header != static_cast<size_t>(count)) {
    throw UsageError(path + ": truncated or padded: the header promises " + std::to_string(count) + " bytes of data, the file has " +
                     std::to_string(raw.size() - header));
  }
  raw.erase(0, header);  // in place: the training images are 47 MB
  data = std::move(raw);
  return dims;
}

torch::Tensor normalise_pixels(const torch::Tensor& bytes) {
  // Mean and standard deviation of the training images' pixels in [0, 1].
  return bytes.to(torch::kFloat32).div(255).sub(0.2860).div(0.3530);
}

Dataset load_fashion_mnist(const std::string& dir, bool train, std::optional<int64_t> limit) {
  const std::string prefix = dir + (train ? "/train" : "/t10k");
  const std::string images_path = prefix + "-images-idx3-ubyte.gz", labels_path = prefix + "-labels-idx1-ubyte.gz";
  std::string pixels, labels;
  const auto idims = read_idx(images_path, 3, pixels);
  const auto ldims = read_idx(labels_path, 1, labels);
  if (idims[1] != 28 || idims[2] != 28) throw UsageError(images_path + ": images are not 28x28");
  if (idims[0] != ldims[0]) {
    throw UsageError(images_path + " holds " + std::to_string(idims[0]) + " images but " + labels_path + " " +
                     std::to_string(ldims[0]) + " labels");
  }
  for (char c : labels) {
    if (static_cast<unsigned char>(c) > 9) throw UsageError(labels_path + ": a label outside 0-9");
  }
  // The whole file is read and checked (its CRC is at its end), but only the samples kept are
  // turned into floats: a short run's ranks then allocate 6 MB, not 750. Each pixel is normalised
  // on its own, so the values are those of normalising all and keeping the first n.
  const int64_t n = limit ? std::min(*limit, idims[0]) : idims[0];
  Dataset d;
  auto bytes = torch::from_blob(pixels.data(), {idims[0], 1, 28, 28}, torch::kUInt8).narrow(0, 0, n);
  d.images = normalise_pixels(bytes);
  d.labels = torch::from_blob(labels.data(), {ldims[0]}, torch::kUInt8).narrow(0, 0, n).to(torch::kInt64);
  d.source = images_path;
  return limit ? first_n(d, n) : d;  // already n long: first_n names the part in `source`
}

Dataset first_n(const Dataset& d, int64_t n) {
  n = std::min(n, d.size());
  Dataset out = d;
  out.images = d.images.narrow(0, 0, n);
  out.labels = d.labels.narrow(0, 0, n);
  out.source = d.source + " (first " + std::to_string(n) + ")";
  return out;
}

Dataset synthetic_dataset(int64_t n, bool train) {
  // One generator for the class patterns (the same in both splits), another for the noise.
  auto patterns_gen = at::make_generator<at::CPUGeneratorImpl>(1234);
  auto noise_gen = at::make_generator<at::CPUGeneratorImpl>(train ? 1 : 2);
  auto patterns = torch::randn({10, 1, 28, 28}, patterns_gen);
  Dataset d;
  d.labels = torch::arange(n, torch::kInt64).remainder(10);
  d.images = patterns.index_select(0, d.labels) + torch::randn({n, 1, 28, 28}, noise_gen).mul(1.5);
  d.source = "synthetic";
  return d;
}

}  // namespace ddp
