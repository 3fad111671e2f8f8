// Hugging Face's safetensors format (docs/formats.md, "safetensors"), read strictly and written
// byte for byte as safetensors' own writer (the Rust crate behind `safetensors.torch.save_file`)
// writes it:
//
//   u64 little-endian N | N bytes of JSON header | data section
//   header = {"__metadata__": {str: str}, NAME: {"dtype": D, "shape": [..], "data_offsets":
//             [begin, end]}, ...}, offsets relative to the data section.
//
// Reader (SafetensorsFile::Open), every check done before anything is allocated from the file's
// numbers, each failure an InputError naming the file and the tensor: N at most 100,000,000
// (safetensors' MAX_HEADER_SIZE) and 8 + N within the file; the header valid UTF-8 JSON, an
// object; each entry exactly {dtype, shape, data_offsets} with a dtype of the format's table,
// non-negative integer dims and offsets; shape product x dtype size computed without overflow
// and equal to end - begin; sorted by offset the tensors tile the data section exactly (the
// first begins at 0, each begins where the previous ends, the last ends at the end of the file:
// no gap, no overlap, no trailing bytes; the Rust reader's own rule). Only F32, BF16 and F16
// convert to fp32 (ReadF32); other dtypes of the table are listed but refused when read.
//
// Writer (WriteSafetensors): F32 only; tensors sorted by name (the crate sorts by dtype
// alignment, then name: one dtype here), `__metadata__` first, compact JSON with keys in the
// order dtype, shape, data_offsets, header padded with spaces to a multiple of 8 bytes so the
// data starts aligned; written through a temporary file, fsynced and renamed (common/files.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/files.h"

namespace cputrain::model {

inline constexpr std::uint64_t kMaxSafetensorsHeader = 100'000'000;

struct SafeTensor {
  std::string name;
  std::string dtype;                 // "F32", "BF16", "F16", or another of the format's table
  std::vector<std::uint64_t> shape;  // [] is a scalar
  std::uint64_t begin = 0, end = 0;  // byte offsets in the data section
  std::uint64_t numel = 0;           // product of shape
};

// Parses and validates a header (the N bytes after the length) against a data section of
// data_bytes bytes. Tensors are returned in offset order. `path` names the file in messages.
std::vector<SafeTensor> ParseSafetensorsHeader(std::string_view header, std::uint64_t data_bytes,
                                               const std::string& path,
                                               std::map<std::string, std::string>* metadata);

// A safetensors file opened and validated; tensors are read on demand.
//
// Thread safety: one thread uses a file at a time.
class SafetensorsFile {
 public:
  static SafetensorsFile Open(const std::string& path);
  const std::string& path() const { return file_.path(); }
  const std::vector<SafeTensor>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // nullptr if there is no tensor of that name.
  const SafeTensor* Find(std::string_view name) const;
  // Reads t (numel floats) into out, converting BF16 and F16; InputError for another dtype.
  void ReadF32(const SafeTensor& t, float* out);

 private:
  explicit SafetensorsFile(InputFile f) : file_(std::move(f)) {}
  InputFile file_;
  std::uint64_t data_start_ = 0;
  std::vector<SafeTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

// One F32 tensor to write: data holds the product of shape floats, row-major.
struct SafeTensorOut {
  std::string name;
  std::vector<std::uint64_t> shape;
  const float* data;
};

// The header as the writer lays it out (with the space padding, without the length).
std::string SafetensorsHeader(std::vector<SafeTensorOut> tensors,
                              const std::map<std::string, std::string>& metadata);

// Writes `tensors` atomically in the byte layout above.
void WriteSafetensors(const std::string& path, std::vector<SafeTensorOut> tensors,
                      const std::map<std::string, std::string>& metadata);

// IEEE half and bfloat16 to float, exact (subnormals, infinities and NaN included).
float HalfToFloat(std::uint16_t h);
float Bf16ToFloat(std::uint16_t b);

}  // namespace cputrain::model
