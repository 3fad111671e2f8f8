#include "report/tensorboard.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "common/crc32c.h"
#include "common/files.h"

namespace cputrain::report {
namespace {

constexpr std::uint32_t kMaskDelta = 0xa282ead8u;
std::uint32_t MaskedCrc(const void* data, std::size_t n) {
  const std::uint32_t c = Crc32c(0, data, n);
  return ((c >> 15) | (c << 17)) + kMaskDelta;
}

// Protocol buffer wire format: a key is (field << 3) | wire type; 0 varint, 1 fixed64,
// 2 length-delimited, 5 fixed32.
void Varint(std::string* out, std::uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}
template <typename T>
void Fixed(std::string* out, int field, int wire, T v) {
  Varint(out, static_cast<std::uint64_t>(field) << 3 | wire);
  out->append(reinterpret_cast<const char*>(&v), sizeof v);  // x86-64: little-endian
}
void Bytes(std::string* out, int field, std::string_view b) {
  Varint(out, static_cast<std::uint64_t>(field) << 3 | 2);
  Varint(out, b.size());
  out->append(b);
}

// A reader over one message's bytes; false from any call once the bytes run out or are not what
// the wire format allows.
class Wire {
 public:
  explicit Wire(std::string_view b) : b_(b) {}
  bool done() const { return at_ >= b_.size(); }
  bool Varint(std::uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (at_ >= b_.size()) return false;
      const auto byte = static_cast<unsigned char>(b_[at_++]);
      *v |= static_cast<std::uint64_t>(byte & 0x7f) << shift;
      if (byte < 0x80) return true;
    }
    return false;
  }
  bool Take(std::size_t n, std::string_view* out) {
    if (b_.size() - at_ < n) return false;
    *out = b_.substr(at_, n);
    at_ += n;
    return true;
  }
  // The next field: its number, wire type, and its bytes (a varint's value in *v).
  bool Next(int* field, int* wire, std::string_view* bytes, std::uint64_t* v) {
    std::uint64_t key = 0;
    if (!Varint(&key)) return false;
    *field = static_cast<int>(key >> 3), *wire = static_cast<int>(key & 7);
    switch (*wire) {
      case 0:
        return Varint(v);
      case 1:
        return Take(8, bytes);
      case 2:
        return Varint(v) && Take(*v, bytes);
      case 5:
        return Take(4, bytes);
      default:
        return false;
    }
  }

 private:
  std::string_view b_;
  std::size_t at_ = 0;
};

template <typename T>
T As(std::string_view b) {
  T v;
  std::memcpy(&v, b.data(), sizeof v);
  return v;
}

bool DecodeValue(std::string_view b, Event* e) {
  Wire w(b);
  std::pair<std::string, float> value;
  int field = 0, wire = 0;
  std::string_view bytes;
  std::uint64_t v = 0;
  while (!w.done()) {
    if (!w.Next(&field, &wire, &bytes, &v)) return false;
    if (field == 1 && wire == 2) value.first = std::string(bytes);
    if (field == 2 && wire == 5) value.second = As<float>(bytes);
  }
  e->scalars.push_back(std::move(value));
  return true;
}

bool DecodeEvent(std::string_view b, Event* e) {
  Wire w(b);
  int field = 0, wire = 0;
  std::string_view bytes;
  std::uint64_t v = 0;
  while (!w.done()) {
    if (!w.Next(&field, &wire, &bytes, &v)) return false;
    if (field == 1 && wire == 1) e->wall_time = As<double>(bytes);
    if (field == 2 && wire == 0) e->step = static_cast<std::int64_t>(v);
    if (field == 3 && wire == 2) e->file_version = std::string(bytes);
    if (field == 5 && wire == 2) {
      Wire s(bytes);
      while (!s.done()) {
        if (!s.Next(&field, &wire, &bytes, &v)) return false;
        if (field == 1 && wire == 2 && !DecodeValue(bytes, e)) return false;
      }
    }
  }
  return true;
}

double Now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string EncodeEvent(const Event& e) {
  std::string out;
  Fixed(&out, 1, 1, e.wall_time);
  Varint(&out, 2 << 3 | 0);
  Varint(&out, static_cast<std::uint64_t>(e.step));
  if (!e.file_version.empty()) Bytes(&out, 3, e.file_version);
  if (!e.scalars.empty()) {
    std::string summary;
    for (const auto& [tag, value] : e.scalars) {
      std::string v;
      Bytes(&v, 1, tag);
      Fixed(&v, 2, 5, value);
      Bytes(&summary, 1, v);
    }
    Bytes(&out, 5, summary);
  }
  return out;
}

std::string FrameRecord(std::string_view data) {
  std::string out;
  const std::uint64_t n = data.size();
  out.append(reinterpret_cast<const char*>(&n), 8);
  const std::uint32_t len_crc = MaskedCrc(&n, 8);
  out.append(reinterpret_cast<const char*>(&len_crc), 4);
  out.append(data);
  const std::uint32_t data_crc = MaskedCrc(data.data(), data.size());
  out.append(reinterpret_cast<const char*>(&data_crc), 4);
  return out;
}

std::vector<Event> ReadEvents(std::string_view bytes, std::size_t* whole_bytes) {
  std::vector<Event> events;
  std::size_t at = 0;
  while (bytes.size() - at >= 16) {  // a record is at least 16 bytes
    const auto n = As<std::uint64_t>(bytes.substr(at, 8));
    if (As<std::uint32_t>(bytes.substr(at + 8, 4)) != MaskedCrc(bytes.data() + at, 8)) break;
    if (n > bytes.size() - at - 16) break;  // torn: the data or its CRC is missing
    const std::string_view data = bytes.substr(at + 12, n);
    if (As<std::uint32_t>(bytes.substr(at + 12 + n, 4)) != MaskedCrc(data.data(), n)) break;
    Event e;
    if (!DecodeEvent(data, &e)) break;
    events.push_back(std::move(e));
    at += 16 + n;
  }
  if (whole_bytes != nullptr) *whole_bytes = at;
  return events;
}

EventFileWriter::EventFileWriter(std::string path, const Keep& keep) : path_(std::move(path)) {
  namespace fs = std::filesystem;
  MakeDirs(fs::path(path_).parent_path().string());
  std::error_code ec;
  const bool resume = keep && fs::exists(path_, ec);
  std::string kept;
  if (resume) {
    const std::string bytes = ReadFile(path_);
    for (const Event& e : ReadEvents(bytes)) {
      if (!e.file_version.empty() || keep(e)) {
        kept += FrameRecord(EncodeEvent(e));
      }
    }
  }
  if (kept.empty()) {
    kept = FrameRecord(EncodeEvent(Event{Now(), 0, kEventFileVersion, {}}));
  }
  // The whole file as it should be, in place at once; then appends.
  WriteFileAtomic(path_, kept);
  file_ = std::make_unique<RecordFile>(path_, false, "check free disk space in train.out_dir");
}

EventFileWriter::~EventFileWriter() = default;

void EventFileWriter::Scalars(std::int64_t step,
                              const std::vector<std::pair<std::string, float>>& values) {
  file_->Append(FrameRecord(EncodeEvent(Event{Now(), step, "", values})));
}

}  // namespace cputrain::report
