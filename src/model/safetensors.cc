#include "model/safetensors.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/error.h"

namespace cputrain::model {
namespace {

using nlohmann::json;

const InputKind kSafetensorsKind{"safetensors file", "a .safetensors file", kMaxCheckpointBytes,
                                 "check model.init_from / --checkpoint"};

// The format's dtype table (safetensors' Dtype enum) and the byte size of each.
int DtypeSize(const std::string& d) {
  static const std::map<std::string, int> kSizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};
  auto it = kSizes.find(d);
  return it == kSizes.end() ? 0 : it->second;
}

[[noreturn]] void Bad(const std::string& path, const std::string& what) {
  throw InputError(fmt::format("safetensors file '{}': {}", path, what),
                   "the file is damaged or not a safetensors file: download or export it again");
}

std::uint64_t NonNegative(const json& v, const std::string& path, const std::string& what) {
  if (!v.is_number_unsigned())
    Bad(path, fmt::format("{} is {}, not an integer >= 0", what, v.dump().substr(0, 40)));
  return v.get<std::uint64_t>();
}

// One entry NAME: {dtype, shape, data_offsets}.
SafeTensor ParseEntry(const std::string& name, const json& v, const std::string& path) {
  const std::string where = fmt::format("tensor '{}'", name);
  if (!v.is_object() || v.size() != 3 || !v.contains("dtype") || !v.contains("shape") ||
      !v.contains("data_offsets")) {
    Bad(path, where + " must be exactly {\"dtype\", \"shape\", \"data_offsets\"}");
  }
  SafeTensor t;
  t.name = name;
  const json& d = v["dtype"];
  if (!d.is_string() || DtypeSize(d.get<std::string>()) == 0) {
    Bad(path, fmt::format("{} has dtype {}, which is not in the safetensors format", where,
                          d.dump().substr(0, 40)));
  }
  t.dtype = d.get<std::string>();
  const json& s = v["shape"];
  if (!s.is_array()) Bad(path, where + ": shape is not an array");
  t.numel = 1;
  for (const json& dim : s) {
    t.shape.push_back(NonNegative(dim, path, where + ": a dimension"));
    if (__builtin_mul_overflow(t.numel, t.shape.back(), &t.numel)) {
      Bad(path, where + ": the product of its shape overflows 64 bits");
    }
  }
  const json& o = v["data_offsets"];
  if (!o.is_array() || o.size() != 2) Bad(path, where + ": data_offsets is not [begin, end]");
  t.begin = NonNegative(o[0], path, where + ": data_offsets[0]");
  t.end = NonNegative(o[1], path, where + ": data_offsets[1]");
  std::uint64_t bytes = 0;
  if (__builtin_mul_overflow(t.numel, std::uint64_t(DtypeSize(t.dtype)), &bytes)) {
    Bad(path, where + ": its size in bytes overflows 64 bits");
  }
  if (t.end < t.begin || t.end - t.begin != bytes) {
    Bad(path, fmt::format("{}: data_offsets [{}, {}] span {} bytes but {} of shape [{}] needs {}",
                          where, t.begin, t.end, t.end < t.begin ? 0 : t.end - t.begin, t.dtype,
                          fmt::join(t.shape, ", "), bytes));
  }
  return t;
}

std::map<std::string, std::string> ParseMetadata(const json& v, const std::string& path) {
  if (!v.is_object()) Bad(path, "__metadata__ is not an object of strings");
  std::map<std::string, std::string> m;
  for (const auto& [k, val] : v.items()) {
    if (!val.is_string()) Bad(path, fmt::format("__metadata__ '{}' is not a string", k));
    m[k] = val.get<std::string>();
  }
  return m;
}

// Sorted by offset, the tensors must tile [0, data_bytes) exactly.
void CheckTiling(std::vector<SafeTensor>& tensors, std::uint64_t data_bytes,
                 const std::string& path) {
  std::sort(tensors.begin(), tensors.end(), [](const SafeTensor& a, const SafeTensor& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t at = 0;
  for (const SafeTensor& t : tensors) {
    if (t.begin != at) {
      Bad(path, fmt::format("tensor '{}' starts at data offset {} but the previous one ends at {} "
                            "({})",
                            t.name, t.begin, at, t.begin < at ? "they overlap" : "a gap"));
    }
    at = t.end;
  }
  if (at != data_bytes) {
    Bad(path, fmt::format("the tensors end at data offset {} but the data section is {} bytes "
                          "({})",
                          at, data_bytes, at > data_bytes ? "truncated" : "trailing bytes"));
  }
}

void PreadExact(const InputFile& f, void* dst, std::size_t bytes, std::uint64_t at) {
  auto* p = static_cast<char*>(dst);
  while (bytes > 0) {
    const ssize_t n = ::pread(f.fd(), p, bytes, static_cast<off_t>(at));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      throw RuntimeError(fmt::format("reading '{}': {}", f.path(), std::strerror(errno)));
    }
    if (n == 0) {
      throw InputError(fmt::format("safetensors file '{}' shrank while being read", f.path()),
                       "do not modify the file while it is loaded");
    }
    p += n;
    at += static_cast<std::uint64_t>(n);
    bytes -= static_cast<std::size_t>(n);
  }
}

std::string JsonString(const std::string& s) { return json(s).dump(); }

}  // namespace

std::vector<SafeTensor> ParseSafetensorsHeader(std::string_view header, std::uint64_t data_bytes,
                                               const std::string& path,
                                               std::map<std::string, std::string>* metadata) {
  const json root = json::parse(header.begin(), header.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) Bad(path, "the header is not valid UTF-8 JSON");
  if (!root.is_object()) Bad(path, "the header is not a JSON object");
  std::vector<SafeTensor> tensors;
  for (const auto& [name, v] : root.items()) {
    if (name == "__metadata__") {
      *metadata = ParseMetadata(v, path);
      continue;
    }
    tensors.push_back(ParseEntry(name, v, path));
  }
  CheckTiling(tensors, data_bytes, path);
  return tensors;
}

SafetensorsFile SafetensorsFile::Open(const std::string& path) {
  SafetensorsFile st(InputFile::Open(path, kSafetensorsKind));
  const std::uint64_t size = st.file_.size();
  unsigned char len[8];
  if (size < 8) Bad(path, fmt::format("{} bytes, shorter than the 8-byte header length", size));
  PreadExact(st.file_, len, 8, 0);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  if (n > kMaxSafetensorsHeader) {
    Bad(path, fmt::format("header length {} is above safetensors' limit of {} bytes", n,
                          kMaxSafetensorsHeader));
  }
  if (n > size - 8) {
    Bad(path, fmt::format("header length {} runs past the end of the {}-byte file", n, size));
  }
  std::string header(n, '\0');
  PreadExact(st.file_, header.data(), n, 8);
  st.data_start_ = 8 + n;
  st.tensors_ = ParseSafetensorsHeader(header, size - st.data_start_, path, &st.metadata_);
  return st;
}

const SafeTensor* SafetensorsFile::Find(std::string_view name) const {
  for (const SafeTensor& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

void SafetensorsFile::ReadF32(const SafeTensor& t, float* out) {
  if (t.dtype == "F32") {
    PreadExact(file_, out, t.numel * sizeof(float), data_start_ + t.begin);
    return;
  }
  if (t.dtype != "BF16" && t.dtype != "F16") {
    throw InputError(fmt::format("safetensors file '{}': tensor '{}' is {}; only F32, BF16 and "
                                 "F16 are supported",
                                 path(), t.name, t.dtype),
                     "convert the model to float32, bfloat16 or float16 first");
  }
  // In chunks: the 16-bit copy of a large tensor is never held whole.
  constexpr std::uint64_t kChunk = 1 << 20;
  std::vector<std::uint16_t> buf(std::min<std::uint64_t>(kChunk, t.numel));
  for (std::uint64_t i = 0; i < t.numel; i += kChunk) {
    const std::uint64_t n = std::min(kChunk, t.numel - i);
    PreadExact(file_, buf.data(), n * 2, data_start_ + t.begin + i * 2);
    for (std::uint64_t j = 0; j < n; ++j)
      out[i + j] = t.dtype == "BF16" ? Bf16ToFloat(buf[j]) : HalfToFloat(buf[j]);
  }
}

std::string SafetensorsHeader(std::vector<SafeTensorOut> tensors,
                              const std::map<std::string, std::string>& metadata) {
  std::sort(tensors.begin(), tensors.end(),
            [](const SafeTensorOut& a, const SafeTensorOut& b) { return a.name < b.name; });
  std::string h = "{";
  if (!metadata.empty()) {
    h += "\"__metadata__\":{";
    for (auto it = metadata.begin(); it != metadata.end(); ++it) {
      if (it != metadata.begin()) h += ',';
      h += JsonString(it->first) + ":" + JsonString(it->second);
    }
    h += "}";
  }
  std::uint64_t at = 0;
  for (const SafeTensorOut& t : tensors) {
    std::uint64_t numel = 1;
    for (std::uint64_t d : t.shape) numel *= d;
    if (h.size() > 1) h += ',';
    h += fmt::format("{}:{{\"dtype\":\"F32\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
                     JsonString(t.name), fmt::join(t.shape, ","), at, at + numel * 4);
    at += numel * 4;
  }
  h += "}";
  h.append((8 - h.size() % 8) % 8, ' ');
  return h;
}

void WriteSafetensors(const std::string& path, std::vector<SafeTensorOut> tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::sort(tensors.begin(), tensors.end(),
            [](const SafeTensorOut& a, const SafeTensorOut& b) { return a.name < b.name; });
  const std::string header = SafetensorsHeader(tensors, metadata);
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(header.size() >> (8 * i));
  AtomicFileWriter w(path);
  w.Write(len, 8);
  w.Write(header);
  for (const SafeTensorOut& t : tensors) {
    std::uint64_t numel = 1;
    for (std::uint64_t d : t.shape) numel *= d;
    w.Write(t.data, numel * sizeof(float));
  }
  w.Commit();
}

float Bf16ToFloat(std::uint16_t b) {
  const std::uint32_t bits = std::uint32_t{b} << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float HalfToFloat(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h >> 15) << 31;
  std::uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);  // inf, NaN (payload kept)
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);  // rebias 15 -> 127
  } else if (man == 0) {
    bits = sign;  // +-0
  } else {
    // Subnormal: normalize the mantissa.
    exp = 113;
    while ((man & 0x400) == 0) {
      man <<= 1;
      --exp;
    }
    bits = sign | (exp << 23) | ((man & 0x3ff) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace cputrain::model
