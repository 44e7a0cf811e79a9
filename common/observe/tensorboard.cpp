// provides: TensorBoardWriter. See Note [TensorBoard event files].
#include "common/observe/tensorboard.h"

#include <sys/stat.h>
#include <sys/time.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "common/basics/errors.h"
#include "common/launch/net.h"

namespace ddp {
namespace {

double wall_time() {
  timeval tv{};
  ::gettimeofday(&tv, nullptr);
  return static_cast<double>(tv.tv_sec) + tv.tv_usec / 1e6;
}

uint32_t masked(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

// Protocol buffer wire format: a key is (field number << 3) | wire type.
void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) out.push_back(static_cast<char>(v | 0x80)), v >>= 7;
  out.push_back(static_cast<char>(v));
}
template <typename T>
void fixed(std::string& out, T v) {  // little-endian, as x86 and ARM store it
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}
void length_delimited(std::string& out, int field, const std::string& bytes) {
  varint(out, static_cast<uint64_t>(field) << 3 | 2);
  varint(out, bytes.size());
  out += bytes;
}

std::string event_header(double t, int64_t step) {
  std::string e;
  varint(e, 1 << 3 | 1), fixed(e, t);                           // Event.wall_time (double)
  varint(e, 2 << 3 | 0), varint(e, static_cast<uint64_t>(step));  // Event.step (int64)
  return e;
}

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  static uint32_t table[256] = {0};
  if (table[1] == 0) {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
      table[i] = c;
    }
  }
  uint32_t crc = 0xffffffffu;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return crc ^ 0xffffffffu;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    throw UsageError("cannot create " + dir + ": " + std::strerror(errno));
  }
  const double t = wall_time();
  path_ = dir + "/events.out.tfevents." + std::to_string(static_cast<long long>(t)) + "." + hostname();
  file_ = std::fopen(path_.c_str(), "wb");
  if (!file_) throw UsageError("cannot create " + path_ + ": " + std::strerror(errno));
  std::string e = event_header(t, 0);
  length_delimited(e, 3, "brain.Event:2");  // Event.file_version
  write_record(e);
  flush();
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fclose(file_);
}

void TensorBoardWriter::add_scalar(const std::string& tag, double value, int64_t step) {
  std::string v;
  length_delimited(v, 1, tag);                                // Summary.Value.tag
  varint(v, 2 << 3 | 5), fixed(v, static_cast<float>(value));  // Summary.Value.simple_value (float)
  std::string summary;
  length_delimited(summary, 1, v);  // Summary.value
  std::string e = event_header(wall_time(), step);
  length_delimited(e, 5, summary);  // Event.summary
  write_record(e);
}

void TensorBoardWriter::write_record(const std::string& data) {
  std::string r;
  const uint64_t n = data.size();
  fixed(r, n);
  fixed(r, masked(crc32c(&n, 8)));
  r += data;
  fixed(r, masked(crc32c(data.data(), data.size())));
  if (std::fwrite(r.data(), 1, r.size(), file_) != r.size()) throw std::runtime_error("cannot write " + path_);
}

void TensorBoardWriter::flush() { std::fflush(file_); }

}  // namespace ddp
