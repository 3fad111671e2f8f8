#include "model/gguf_file.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "common/error.h"
#include "common/files.h"

namespace cputrain::model {
namespace {

// GGUF value types (gguf.h: GGUF_TYPE_*).
constexpr std::uint32_t kTypeUint32 = 4, kTypeInt32 = 5, kTypeFloat32 = 6, kTypeBool = 7,
                        kTypeString = 8, kTypeArray = 9;

template <typename T>
void Put(std::vector<std::uint8_t>* out, T v) {
  const auto* p = reinterpret_cast<const std::uint8_t*>(&v);  // x86-64: little-endian
  out->insert(out->end(), p, p + sizeof v);
}
void PutString(std::vector<std::uint8_t>* out, const std::string& s) {
  Put<std::uint64_t>(out, s.size());
  out->insert(out->end(), s.begin(), s.end());
}
std::uint64_t Padded(std::uint64_t n) {
  return (n + kGgufAlignment - 1) / kGgufAlignment * kGgufAlignment;
}

}  // namespace

const char* GgmlTypeName(GgmlType t) {
  switch (t) {
    case GgmlType::kF32:
      return "F32";
    case GgmlType::kF16:
      return "F16";
    case GgmlType::kQ8_0:
      return "Q8_0";
    case GgmlType::kBf16:
      return "BF16";
  }
  return "?";
}

std::uint64_t GgmlBytes(GgmlType t, std::uint64_t numel) {
  switch (t) {
    case GgmlType::kF32:
      return 4 * numel;
    case GgmlType::kF16:
    case GgmlType::kBf16:
      return 2 * numel;
    case GgmlType::kQ8_0:
      return numel / kQ8Block * kQ8BlockBytes;
  }
  return 0;
}

void GgufWriter::Key(const std::string& key, std::uint32_t type) {
  if (std::find(keys_.begin(), keys_.end(), key) != keys_.end()) {
    throw RuntimeError(fmt::format("GGUF key '{}' written twice", key),
                       "this is a bug in cputrain-numa's GGUF export");
  }
  keys_.push_back(key);
  PutString(&kv_, key);
  Put(&kv_, type);
}

void GgufWriter::Uint32(const std::string& key, std::uint32_t v) {
  Key(key, kTypeUint32);
  Put(&kv_, v);
}
void GgufWriter::Float32(const std::string& key, float v) {
  Key(key, kTypeFloat32);
  Put(&kv_, v);
}
void GgufWriter::Bool(const std::string& key, bool v) {
  Key(key, kTypeBool);
  Put<std::uint8_t>(&kv_, v ? 1 : 0);
}
void GgufWriter::String(const std::string& key, const std::string& v) {
  Key(key, kTypeString);
  PutString(&kv_, v);
}
void GgufWriter::Strings(const std::string& key, const std::vector<std::string>& v) {
  Key(key, kTypeArray);
  Put(&kv_, kTypeString);
  Put<std::uint64_t>(&kv_, v.size());
  for (const std::string& s : v) PutString(&kv_, s);
}
void GgufWriter::Float32s(const std::string& key, const std::vector<float>& v) {
  Key(key, kTypeArray);
  Put(&kv_, kTypeFloat32);
  Put<std::uint64_t>(&kv_, v.size());
  for (float x : v) Put(&kv_, x);
}
void GgufWriter::Int32s(const std::string& key, const std::vector<std::int32_t>& v) {
  Key(key, kTypeArray);
  Put(&kv_, kTypeInt32);
  Put<std::uint64_t>(&kv_, v.size());
  for (std::int32_t x : v) Put(&kv_, x);
}

void GgufWriter::Tensor(const std::string& name, std::vector<std::uint64_t> shape, GgmlType type,
                        Encoder encode) {
  tensors_.push_back({name, std::move(shape), type, std::move(encode)});
}

void GgufWriter::Write(const std::string& path) const {
  std::vector<std::uint8_t> head;
  head.insert(head.end(), {'G', 'G', 'U', 'F'});
  Put(&head, kGgufVersion);
  Put<std::uint64_t>(&head, tensors_.size());
  Put<std::uint64_t>(&head, keys_.size());
  head.insert(head.end(), kv_.begin(), kv_.end());
  std::uint64_t offset = 0;  // into the data section
  for (const PendingTensor& t : tensors_) {
    PutString(&head, t.name);
    Put<std::uint32_t>(&head, static_cast<std::uint32_t>(t.shape.size()));
    std::uint64_t numel = 1;
    for (auto d = t.shape.rbegin(); d != t.shape.rend(); ++d) {
      Put<std::uint64_t>(&head, *d);
      numel *= *d;
    }
    Put(&head, t.type);
    Put(&head, offset);
    offset += Padded(GgmlBytes(t.type, numel));
  }
  head.resize(Padded(head.size()), 0);
  AtomicFileWriter out(path);
  out.Write(head.data(), head.size());
  std::vector<std::uint8_t> data;
  for (const PendingTensor& t : tensors_) {
    std::uint64_t numel = 1;
    for (std::uint64_t d : t.shape) numel *= d;
    data.clear();
    t.encode(&data);
    if (data.size() != GgmlBytes(t.type, numel)) {
      throw RuntimeError(fmt::format("GGUF tensor '{}': {} bytes encoded, {} expected", t.name,
                                     data.size(), GgmlBytes(t.type, numel)),
                         "this is a bug in cputrain-numa's GGUF export");
    }
    data.resize(Padded(data.size()), 0);
    out.Write(data.data(), data.size());
  }
  out.Commit();
}

}  // namespace cputrain::model
