// model/gguf_file: the GGUF v3 container, llama.cpp's model file (docs/gguf.md, "Layout"). All
// integers little-endian; a string is a uint64 byte count and the UTF-8 bytes (no terminator).
//
//   "GGUF", uint32 version 3, uint64 tensor count, uint64 key-value count
//   key-values:   string key, uint32 value type, value (an array: uint32 element type, uint64
//                 count, the elements)
//   tensor infos: string name, uint32 dimension count, uint64 dimensions innermost first (ggml's
//                 ne: a (rows, cols) matrix is written cols, rows), uint32 ggml type, uint64
//                 offset into the data section (a multiple of the alignment)
//   zero padding to the alignment (32 bytes: general.alignment's default, not written)
//   the data section: each tensor's bytes, zero-padded to the alignment
//
// The writer streams: each tensor's bytes are made by its encoder while the file is written, so
// one tensor is held at a time, and the file is written through a temporary and renamed
// (common/files.h, AtomicFileWriter): readers see the old file or the whole new one.
//
// Thread safety: one thread uses a writer.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace cputrain::model {

// ggml's tensor types written here (ggml.h: GGML_TYPE_*). Q8_0: blocks of 32 values along a
// row, each an fp16 scale d = max |x| / 127 then 32 int8 q = round(x / d): 34 bytes.
enum class GgmlType : std::uint32_t { kF32 = 0, kF16 = 1, kQ8_0 = 8, kBf16 = 30 };
const char* GgmlTypeName(GgmlType t);  // "F32", "F16", "Q8_0", "BF16"
inline constexpr std::uint64_t kQ8Block = 32;
inline constexpr std::uint64_t kQ8BlockBytes = 34;
inline constexpr std::uint64_t kGgufAlignment = 32;
inline constexpr std::uint32_t kGgufVersion = 3;

// The bytes of a tensor of `numel` elements (a row length that is a multiple of kQ8Block for
// Q8_0) of type t.
std::uint64_t GgmlBytes(GgmlType t, std::uint64_t numel);

class GgufWriter {
 public:
  // Key-values, in the order added; a key may be added once.
  void Uint32(const std::string& key, std::uint32_t v);
  void Float32(const std::string& key, float v);
  void Bool(const std::string& key, bool v);
  void String(const std::string& key, const std::string& v);
  void Strings(const std::string& key, const std::vector<std::string>& v);
  void Float32s(const std::string& key, const std::vector<float>& v);
  void Int32s(const std::string& key, const std::vector<std::int32_t>& v);

  // A tensor of `shape` (outermost first, as numpy and PyTorch write shapes: (rows, cols)) and
  // type; `encode` appends its GgmlBytes(type, numel) bytes to the buffer it is given when the
  // data section is written.
  using Encoder = std::function<void(std::vector<std::uint8_t>*)>;
  void Tensor(const std::string& name, std::vector<std::uint64_t> shape, GgmlType type,
              Encoder encode);
  std::size_t tensor_count() const { return tensors_.size(); }

  // Writes the file (through a temporary, renamed into place). Throws as common/files.h's
  // writers do (a path that cannot be written: InputError; disk full: RuntimeError).
  void Write(const std::string& path) const;

 private:
  struct PendingTensor {
    std::string name;
    std::vector<std::uint64_t> shape;
    GgmlType type;
    Encoder encode;
  };
  void Key(const std::string& key, std::uint32_t type);
  std::vector<std::uint8_t> kv_;  // the encoded key-values
  std::vector<std::string> keys_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace cputrain::model
