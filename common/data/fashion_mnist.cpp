// provides: the Fashion-MNIST reader (gzipped IDX via zlib) and the synthetic dataset.
#include "common/data/fashion_mnist.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include "common/basics/errors.h"

namespace ddp {
namespace {

// What a gzip file says it holds: its last 4 bytes (ISIZE, little-endian), the uncompressed size
// modulo 2^32; nullopt if the file is shorter than a gzip header and trailer.
std::optional<uint32_t> gzip_isize(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  const std::streamoff file = in ? static_cast<std::streamoff>(in.tellg()) : 0;
  if (file < 18) return std::nullopt;
  unsigned char b[4];
  in.seekg(file - 4);
  if (!in.read(reinterpret_cast<char*>(b), 4)) return std::nullopt;
  return b[0] | b[1] << 8 | b[2] << 16 | static_cast<uint32_t>(b[3]) << 24;
}

// The first `limit` bytes of a gzipped file (all of them by default), and whether zlib read it as
// it is (gzdirect: a file that is not gzipped). The CRC at the file's end is checked only when
// the whole file is read.
std::string read_gzip(const std::string& path, bool& direct, size_t limit = SIZE_MAX) {
  gzFile f = ::gzopen(path.c_str(), "rb");
  if (!f) {
    throw UsageError("cannot open " + path + ": " + std::strerror(errno) +
                     " (install dataset-fashion-mnist, point --data-dir at the files, or use --synthetic)");
  }
  std::string out;
  // 47 MB of training images grown by doubling would be copied twice over: at most 64 times the
  // file (a file that is not gzipped says nothing true in its last 4 bytes).
  const size_t hint = gzip_isize(path).value_or(0);
  out.reserve(std::min({static_cast<size_t>(hint), limit, static_cast<size_t>(std::filesystem::file_size(path)) * 64}));
  char buf[1 << 16];
  int n = 1;
  while (out.size() < limit && (n = ::gzread(f, buf, static_cast<unsigned>(std::min(sizeof(buf), limit - out.size())))) > 0) {
    out.append(buf, static_cast<size_t>(n));
  }
  int err = Z_OK;
  const std::string msg = ::gzerror(f, &err);
  direct = ::gzdirect(f) == 1;
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

// The dimensions an IDX header gives, its magic checked; `raw` holds at least the header.
std::vector<int64_t> idx_dims(const std::string& path, int expected_dims, const std::string& raw) {
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
  for (int d = 0; d < expected_dims; ++d) dims.push_back(big_endian(raw, 4 + 4 * d));
  return dims;
}

}  // namespace

// Note [Reading only the samples a run uses]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A run of --train-samples 2048 uses 3 % of the 47 MB of training images, yet inflating all of
// them took each rank 0.3 s of CPU, on every start (the tests start some 1,000 ranks). So with
// `first` below the file's count only the header and the first items are inflated. Two checks
// keep a damaged file from passing unnoticed: zlib still refuses a stream it cannot decode, and
// the size the gzip trailer records (ISIZE, its last 4 bytes) must be the one the header
// promises, which a download cut short fails. The CRC covers the whole file and is checked by
// every run that reads it all (no limit, or a limit past the count); a byte flipped past the
// items a short run uses is therefore found by the first run that reads that far.
std::vector<int64_t> read_idx(const std::string& path, int expected_dims, std::string& data, std::optional<int64_t> first) {
  const size_t header = 4 + 4 * static_cast<size_t>(expected_dims);
  bool direct = false;
  std::string raw = read_gzip(path, direct, first ? header : SIZE_MAX);
  std::vector<int64_t> dims = idx_dims(path, expected_dims, raw);
  int64_t count = 1;
  for (int64_t d : dims) count *= d;
  const size_t promised = header + static_cast<size_t>(count);
  if (first && *first < dims[0]) {
    const size_t item = dims[0] > 0 ? static_cast<size_t>(count / dims[0]) : 0;
    raw = read_gzip(path, direct, header + static_cast<size_t>(std::max<int64_t>(*first, 0)) * item);
    // Not gzipped (zlib reads it as it is): its size is what the header promises.
    const size_t recorded = direct ? static_cast<size_t>(std::filesystem::file_size(path)) : gzip_isize(path).value_or(0);
    if (recorded != (direct ? promised : promised & 0xffffffffu)) {
      throw UsageError(path + ": truncated or corrupt: its header promises " + std::to_string(promised) + " bytes, its " +
                       (direct ? "size is " : "gzip trailer records ") + std::to_string(recorded) + "; download it again");
    }
    count = std::max<int64_t>(*first, 0) * static_cast<int64_t>(item);
  } else if (first) {
    raw = read_gzip(path, direct);
  }
  if (raw.size() - header != static_cast<size_t>(count)) {
    throw UsageError(path + ": truncated or padded: the header promises " + std::to_string(count) + " bytes of data, the file has " +
                     std::to_string(raw.size() - header));
  }
  raw.erase(0, header);  // in place: the training images are 47 MB
  data = std::move(raw);
  return dims;
}

torch::Tensor normalise_pixels(const torch::Tensor& bytes) {
  // Mean and standard deviation of the training images' pixels in [0, 1]. In place: the same
  // arithmetic, but one 188 MB tensor for the training images instead of four, each new one
  // touched page by page (a rank's peak memory 942 -> 408 MB, its start 0.5 s of CPU shorter).
  torch::Tensor x = bytes.to(torch::kFloat32);
  x.div_(255).sub_(0.2860).div_(0.3530);
  return x;
}

Dataset load_fashion_mnist(const std::string& dir, bool train, std::optional<int64_t> limit) {
  const std::string prefix = dir + (train ? "/train" : "/t10k");
  const std::string images_path = prefix + "-images-idx3-ubyte.gz", labels_path = prefix + "-labels-idx1-ubyte.gz";
  std::string pixels, labels;
  // Only the images a run keeps are inflated (Note [Reading only the samples a run uses]).
  const auto idims = read_idx(images_path, 3, pixels, limit);
  const auto ldims = read_idx(labels_path, 1, labels);
  if (idims[1] != 28 || idims[2] != 28) throw UsageError(images_path + ": images are not 28x28");
  if (idims[0] != ldims[0]) {
    throw UsageError(images_path + " holds " + std::to_string(idims[0]) + " images but " + labels_path + " " +
                     std::to_string(ldims[0]) + " labels");
  }
  for (char c : labels) {
    if (static_cast<unsigned char>(c) > 9) throw UsageError(labels_path + ": a label outside 0-9");
  }
  // Each pixel is normalised on its own, so the values are those of normalising all and keeping
  // the first n.
  const int64_t n = limit ? std::min(*limit, idims[0]) : idims[0];
  Dataset d;
  d.images = normalise_pixels(torch::from_blob(pixels.data(), {n, 1, 28, 28}, torch::kUInt8));
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
