// defines: TensorBoardWriter: scalars in TensorBoard's event-file format, without TensorFlow.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>

namespace ddp {

// Note [TensorBoard event files]
// An event file is a TFRecord stream: each record is [length u64][masked CRC-32C of the length]
// [data][masked CRC-32C of the data], and each record's data is an `Event` protocol buffer. The
// first event carries file_version "brain.Event:2"; each scalar is an Event with wall_time,
// step and a Summary holding one Value {tag, simple_value}. Those few protobuf fields are
// encoded by hand below; TensorBoard's own reader checks the CRCs (tests/tensorboard_read.py).
class TensorBoardWriter {
 public:
  // Creates `dir` and events.out.tfevents.<seconds>.<host> in it.
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  void add_scalar(const std::string& tag, double value, int64_t step);
  void flush();
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& data);
  std::string path_;
  std::FILE* file_ = nullptr;
};

// CRC-32C (Castagnoli), as TFRecord uses; exposed for the tests.
uint32_t crc32c(const void* data, size_t n);

}  // namespace ddp
