// TensorBoard event files written directly, without TensorFlow or protobuf:
// `log.tensorboard: true` makes rank 0 write <log.dir>/tb/events.out.tfevents.<time>.<host>.
//
// Format (what TensorBoard's reader expects): a sequence of TFRecords
//   uint64 length (little-endian) | uint32 masked_crc32c(length bytes) |
//   data (length bytes)           | uint32 masked_crc32c(data)
// where masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8 and CRC32C is the
// Castagnoli CRC. Each data is a serialized tensorflow.Event protobuf; only the
// fields scalars need are written:
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; float simple_value = 2; }
// The first record is {wall_time, file_version: "brain.Event:2"}. Records are
// flushed as written, so a killed job keeps what it logged.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lattice {

uint32_t crc32c(const void* data, size_t n);
uint32_t masked_crc32c(const void* data, size_t n);

// The serialized Event of one step's scalars (tag, value), as written.
std::string scalar_event(double wall_time, int64_t step, const std::vector<std::pair<std::string, float>>& scalars);

// A resumed run's TensorBoard data continues from its checkpoint, as its
// metrics.jsonl does: in every event file of `dir`, drops the events of steps
// after `last_step` (a run killed after its last checkpoint logged them; the
// resumed run logs those steps again) and a record cut short by the kill.
// A file is rewritten (tmp + rename) only when something is dropped. Returns
// the events dropped.
int64_t truncate_event_files(const std::string& dir, int64_t last_step);

class TensorBoardWriter {
 public:
  // Creates `dir` and a new event file in it.
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  void scalars(int64_t step, const std::vector<std::pair<std::string, float>>& values);
  const std::string& path() const { return path_; }

 private:
  void write_record(std::string_view data);
  std::FILE* f_ = nullptr;
  std::string path_;
};

}  // namespace lattice
