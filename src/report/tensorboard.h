// report/tensorboard.h: TensorBoard event files (docs/formats.md, "TensorBoard event files"),
// written without TensorFlow: the TFRecord framing and the Event and Summary protocol buffers,
// encoded by hand (the few fields a scalar needs).
//
// A record is
//   uint64 length, uint32 masked CRC32C of those 8 bytes, `length` bytes of data,
//   uint32 masked CRC32C of the data
// (little-endian; masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8). The data is an Event:
//   1: double wall_time (seconds since 1970)   2: int64 step
//   3: string file_version ("brain.Event:2", the first record)
//   5: Summary { repeated 1: Value { 1: string tag, 2: float simple_value } }
// TensorBoard's EventAccumulator reads simple_value as a scalar
// (tests/reference/tensorboard_check.py).
//
// Appending: each record is one write(2); a write that fails part way is cut back, so the file
// holds whole records only. A file whose writer was killed mid-record (SIGKILL, power loss) ends
// in a torn record: reading stops there, and a writer reopening the file for a resumed run
// rewrites it without the torn tail and without the records after the step it resumes from
// (atomically: temporary + rename), so no step is ever recorded twice.
//
// Thread safety: one thread uses a file at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/files.h"

namespace cputrain::report {

inline constexpr char kEventFileVersion[] = "brain.Event:2";

// One decoded event: a scalar summary's values, or the file_version record.
struct Event {
  double wall_time = 0;
  std::int64_t step = 0;
  std::string file_version;                            // "" unless the first record
  std::vector<std::pair<std::string, float>> scalars;  // (tag, simple_value)
};

// The encodings, for the writer and the tests.
std::string EncodeEvent(const Event& e);
std::string FrameRecord(std::string_view data);  // length, CRCs and the data
// The events of a file's bytes up to the first record that is torn or fails its CRC (or is not
// an Event); *whole_bytes: where the last whole record ends.
std::vector<Event> ReadEvents(std::string_view bytes, std::size_t* whole_bytes = nullptr);

class EventFileWriter {
 public:
  // Which events of an existing file a reopened writer keeps (the file_version record always).
  using Keep = std::function<bool(const Event&)>;
  // Opens `path` (its directory is created). `keep` null: a new file holding the file_version
  // record. Otherwise an existing file keeps its whole records that `keep` accepts, the rest
  // (and a torn tail) is dropped, and writes append; a missing file is started new. Throws as
  // common/files.h's writers do.
  EventFileWriter(std::string path, const Keep& keep);
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  // One event of scalars at `step`, stamped with the current time. Throws RuntimeError (disk
  // full) or InputError (the path is at fault) naming the file; the file keeps whole records.
  void Scalars(std::int64_t step, const std::vector<std::pair<std::string, float>>& values);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::unique_ptr<RecordFile> file_;
};

}  // namespace cputrain::report
