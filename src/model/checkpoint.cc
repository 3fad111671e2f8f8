#include "model/checkpoint.h"

#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/crc32c.h"
#include "common/error.h"
#include "common/files.h"
#include "kernels/bf16.h"
#include "model/checkpoint_path.h"
#include "model/family.h"
#include "model/hf.h"

namespace cputrain::model {
namespace {

constexpr std::size_t kHeaderInts = 256;
constexpr std::size_t kHeaderBytes = kHeaderInts * sizeof(int32_t);
constexpr int kTokenFileMagic = 20240520;  // data/token_file.h; named here for the hint
constexpr int kDebugStateMagic = 20240327;

const InputKind kCheckpointKind{"checkpoint", "a model.bin file", kMaxCheckpointBytes,
                                "check model.init_from / --checkpoint"};

void ReadExact(InputFile& f, void* dst, std::size_t bytes) {
  if (!f.Read(dst, bytes)) {
    throw InputError(fmt::format("checkpoint '{}' is truncated", f.path()),
                     "the file is incomplete (an interrupted copy?); copy or re-create it");
  }
}

// A safetensors file starts with its header's length (u64) and then the JSON header's '{'.
bool LooksLikeSafetensors(const int32_t* h, std::uint64_t file_bytes) {
  std::uint64_t n;
  std::memcpy(&n, h, sizeof n);
  return reinterpret_cast<const char*>(h)[8] == '{' && n >= 2 && n <= file_bytes - 8;
}

[[noreturn]] void SafetensorsGiven(const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  throw InputError(
      fmt::format(
          "checkpoint '{}' is a safetensors file, not a model.bin: Hugging Face weights are "
          "read from their directory, with its config.json",
          path),
      // In no command's words: --checkpoint of generate, model.init_from of train, ...
      IsHfDir(dir.empty() ? "." : dir)
          ? fmt::format("pass the directory instead: {}", dir.empty() ? "." : dir)
          : "pass the directory holding it and its config.json (Hugging Face's layout)");
}

void CheckMagicAndVersion(const std::string& path, const int32_t* h) {
  if (h[0] == kFamilyCheckpointMagic) {
    if (h[1] != kFamilyCheckpointVersion && h[1] != kFamilyCheckpointVersionUnchecked) {
      throw InputError(
          fmt::format("checkpoint '{}': version {} of the model-family format is not "
                      "supported (expected {}, or {} without its checksum)",
                      path, h[1], kFamilyCheckpointVersion, kFamilyCheckpointVersionUnchecked),
          "re-create the checkpoint with this cputrain-numa, or export it from the "
          "version that wrote it with `export --format hf`");
    }
    return;
  }
  if (h[0] != kCheckpointMagic) {
    std::string hint = "pass a checkpoint written by cputrain-numa train or llm.c";
    if (h[0] == kTokenFileMagic)
      hint = "this is a token file (magic 20240520): use it as data.train";
    if (h[0] == kDebugStateMagic) hint = "this is an llm.c debug-state file, not a checkpoint";
    throw InputError(fmt::format("checkpoint '{}': bad magic {} (expected {}, llm.c's, or {}, "
                                 "cputrain-numa's model-family format)",
                                 path, h[0], kCheckpointMagic, kFamilyCheckpointMagic),
                     hint);
  }
  if (h[1] != kCheckpointVersion && h[1] != kCheckpointVersionBf16) {
    throw InputError(fmt::format("checkpoint '{}': version {} is not supported (expected {}, fp32, "
                                 "or {}, llm.c's bf16)",
                                 path, h[1], kCheckpointVersion, kCheckpointVersionBf16),
                     "re-create the checkpoint with cputrain-numa train or llm.c");
  }
}

// Bytes of one parameter in a file of this (checked) version.
std::size_t ParamBytes(int version) {
  return version == kCheckpointVersionBf16 ? sizeof(uint16_t) : sizeof(float);
}

// Reads n parameters into dst (floats), continuing *crc over the bytes read. A bf16 file's n values
// are read into the first half of dst's bytes, then widened in place from the last to the first:
// float i covers the bytes of bf16 values 2i and 2i+1, which are read before it is written (no
// buffer is allocated).
void ReadParams(InputFile& f, int version, float* dst, std::size_t n, uint32_t* crc) {
  ReadExact(f, dst, n * ParamBytes(version));
  *crc = Crc32c(*crc, dst, n * ParamBytes(version));
  if (version != kCheckpointVersionBf16) return;
  unsigned char* bytes = reinterpret_cast<unsigned char*>(dst);
  for (std::size_t i = n; i-- > 0;) {
    uint16_t b;
    std::memcpy(&b, bytes + i * sizeof b, sizeof b);
    const float x = kernels::Bf16ToFloat(b);
    std::memcpy(bytes + i * sizeof x, &x, sizeof x);
  }
}

// The model-family header's shape: h[2] bytes of JSON (model/shape.h's ShapeToJson) from byte 12.
Shape FamilyShape(const std::string& path, const int32_t* h) {
  constexpr std::size_t kMaxJson = kHeaderBytes - 3 * sizeof(int32_t);
  if (h[2] < 2 || static_cast<std::size_t>(h[2]) > kMaxJson) {
    throw InputError(fmt::format("checkpoint '{}': its header's shape is {} bytes long, not in "
                                 "[2, {}]",
                                 path, h[2], kMaxJson),
                     "the file is damaged");
  }
  const std::string_view text(reinterpret_cast<const char*>(h + 3), static_cast<std::size_t>(h[2]));
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  try {
    if (j.is_discarded()) throw std::runtime_error("not valid JSON");
    return ShapeFromJson(j);
  } catch (const InputError& e) {
    throw InputError(fmt::format("checkpoint '{}': {}", path, e.what()), "the file is damaged");
  } catch (const std::exception& e) {
    throw InputError(
        fmt::format("checkpoint '{}': its header's shape cannot be read ({})", path, e.what()),
        "the file is damaged");
  }
}

// Reads and validates the header of `f`, leaving it positioned at the first tensor. Every size
// is judged before anything is allocated: the shape against model/limits.h (so no size derived
// from it overflows), then the size it implies against the file's. *version: 3 or 5.
// *trailer: the file ends with a CRC32C of all its bytes before it (the model-family format 2).
Shape ReadHeader(InputFile& f, int* version, uint32_t* crc = nullptr, bool* trailer = nullptr) {
  const std::string& path = f.path();
  if (f.size() < kHeaderBytes) {
    throw InputError(fmt::format("checkpoint '{}' is {} bytes, shorter than the {}-byte header",
                                 path, f.size(), kHeaderBytes),
                     "the file is not an llm.c checkpoint or is truncated");
  }
  int32_t h[kHeaderInts];
  ReadExact(f, h, kHeaderBytes);
  if (h[0] != kCheckpointMagic && h[0] != kFamilyCheckpointMagic &&
      LooksLikeSafetensors(h, f.size()))
    SafetensorsGiven(path);
  CheckMagicAndVersion(path, h);
  if (crc) *crc = Crc32c(0, h, kHeaderBytes);
  *version = h[0] == kFamilyCheckpointMagic ? kCheckpointVersion : h[1];  // both fp32
  const bool has_trailer = h[0] == kFamilyCheckpointMagic && h[1] == kFamilyCheckpointVersion;
  if (trailer) *trailer = has_trailer;
  Shape s;
  if (h[0] == kFamilyCheckpointMagic) {
    s = FamilyShape(path, h);
  } else {
    s.maxT = h[2];
    s.V = h[3];
    s.L = h[4];
    s.NH = h[5];
    s.C = h[6];
    s.Vp = h[7];
  }
  const std::string problem = s.Problem();
  if (!problem.empty()) {
    throw InputError(fmt::format("checkpoint '{}': its header describes an impossible model ({}): "
                                 "{}",
                                 path, s.ToString(), problem),
                     "the file is damaged or not an llm.c checkpoint");
  }
  // At most 1024 + 4 * 2^40 bytes for a valid shape: no overflow.
  const std::uint64_t expect =
      kHeaderBytes + s.ParamCount() * ParamBytes(h[1]) + (has_trailer ? sizeof(uint32_t) : 0);
  if (f.size() != expect) {
    throw InputError(fmt::format("checkpoint '{}' is {} bytes but its header ({}) needs {}", path,
                                 f.size(), s.ToString(), expect),
                     f.size() < expect ? "the file is truncated: copy or re-create it"
                                       : "the file has trailing data: it is damaged");
  }
  return s;
}

// The model-family format's trailer: the CRC32C of every byte before it, which *crc (continued
// over the file so far) must equal; *crc then continues over the trailer too, so that it is the
// whole file's, as the state.bin beside it records.
void CheckTrailer(InputFile& f, uint32_t* crc) {
  uint32_t recorded = 0;
  ReadExact(f, &recorded, sizeof recorded);
  if (recorded != *crc) {
    throw InputError(fmt::format("checkpoint '{}' is damaged: its CRC32C is {:08x}, its trailer "
                                 "records {:08x} (a flipped bit, an edited header, a bad disk or "
                                 "copy)",
                                 f.path(), *crc, recorded),
                     "copy the checkpoint again from a good source, or use the one before it (a "
                     "checkpoints/step_N directory)");
  }
  *crc = Crc32c(*crc, &recorded, sizeof recorded);
}

}  // namespace

Shape ReadCheckpointShape(const std::string& path, std::optional<HeadSpec> head) {
  if (IsHfDir(path)) return ReadHfShape(path, head);
  InputFile f = InputFile::Open(path, kCheckpointKind);
  int version = 0;
  return ReadHeader(f, &version);
}

void CheckModelDigest(const std::string& path, const FileDigest& got) {
  const std::string state = (std::filesystem::path(path).parent_path() / kStateFile).string();
  const std::optional<StateTrailer> t = ReadStateTrailer(state);
  if (!t || t->model == got) return;  // no checksum recorded (llm.c's, an older run's), or equal
  throw InputError(
      t->model.bytes != got.bytes
          ? fmt::format("checkpoint '{}' is damaged: it is {} bytes, the state.bin beside it "
                        "records {}",
                        path, got.bytes, t->model.bytes)
          : fmt::format("checkpoint '{}' is damaged: its CRC32C is {:08x}, the state.bin beside "
                        "it records {:08x} (a flipped bit, a bad disk or copy)",
                        path, got.crc32c, t->model.crc32c),
      "copy the checkpoint again from a good source, or use the one before it (a "
      "checkpoints/step_N directory)");
}

namespace {

// The first weight that is not finite in the file's order (tensor-major: each tensor's L copies
// together), named by its tensor, layer and element, and by its place among the file's values.
void CheckFiniteInFileOrder(const std::string& path, const ParamLayout& layout,
                            const float* params) {
  for (const TensorInfo& info : layout.tensors()) {
    for (int l = 0; l < (info.per_layer ? layout.shape().L : 1); ++l) {
      const float* t = params + layout.offset(info.t, l);
      const std::size_t i = FirstNonFinite(t, info.numel);
      if (i == info.numel) continue;
      throw InputError(
          fmt::format("checkpoint '{}': tensor {}{}, element {} is {} (value {} of the file, "
                      "whose tensors are in the order of docs/formats.md)",
                      path, info.name, info.per_layer ? fmt::format(", layer {}", l) : "", i, t[i],
                      layout.checkpoint_offset(info.t, l) + i),
          kDivergedHint);
    }
  }
}

}  // namespace

void LoadCheckpoint(const std::string& path, const ParamLayout& layout, float* params,
                    uint64_t head_seed) {
  LoadCheckpoint(path, layout, params, head_seed, [](Tensor, int) {});
}

void LoadCheckpoint(const std::string& path, const ParamLayout& layout, float* params,
                    uint64_t head_seed, TensorDone done) {
  if (IsHfDir(path)) {
    LoadHf(path, layout, params, head_seed, done);  // refuses a weight that is not finite, by name
    return;
  }
  InputFile f = InputFile::Open(path, kCheckpointKind);
  int version = 0;
  uint32_t crc = 0;
  bool trailer = false;
  const Shape s = ReadHeader(f, &version, &crc, &trailer);
  if (!(s == layout.shape())) {
    throw InputError(fmt::format("checkpoint '{}' has shape {}, expected {}", path, s.ToString(),
                                 layout.shape().ToString()),
                     "use a checkpoint of this model");
  }
  // The file is tensor-major; our buffer is layer-major. Read each tensor copy into place.
  for (const TensorInfo& info : layout.tensors()) {
    for (int l = 0; l < (info.per_layer ? s.L : 1); ++l) {
      ReadParams(f, version, params + layout.offset(info.t, l), info.numel, &crc);
    }
  }
  if (trailer) CheckTrailer(f, &crc);
  CheckModelDigest(path, {f.size(), crc});
  CheckFiniteInFileOrder(path, layout, params);
  for (const TensorInfo& info : layout.tensors())
    for (int l = 0; l < (info.per_layer ? s.L : 1); ++l) done(info.t, l);
}

FileDigest SaveCheckpoint(const std::string& path, const ParamLayout& layout, const float* params) {
  const Shape& s = layout.shape();
  int32_t h[kHeaderInts] = {};
  if (FamilyOf(s.arch).llmc) {  // llm.c's header: llm.c and its scripts read our GPT-2 files
    h[0] = kCheckpointMagic;
    h[1] = kCheckpointVersion;
    h[2] = s.maxT;
    h[3] = s.V;
    h[4] = s.L;
    h[5] = s.NH;
    h[6] = s.C;
    h[7] = s.Vp;
  } else {
    const std::string text = ShapeToJson(s).dump();
    CPUTRAIN_CHECK(text.size() <= kHeaderBytes - 3 * sizeof(int32_t),
                   "the shape does not fit the checkpoint header");
    h[0] = kFamilyCheckpointMagic;
    h[1] = kFamilyCheckpointVersion;
    h[2] = static_cast<int32_t>(text.size());
    std::memcpy(h + 3, text.data(), text.size());
  }
  AtomicFileWriter w(path);
  w.Write(h, kHeaderBytes);
  for (const TensorInfo& info : layout.tensors()) {
    for (int l = 0; l < (info.per_layer ? s.L : 1); ++l) {
      w.Write(params + layout.offset(info.t, l), info.numel * sizeof(float));
    }
  }
  if (!FamilyOf(s.arch).llmc) {  // the family format's trailer (llm.c's files have none)
    const uint32_t crc = w.digest().crc32c;  // of every byte written before it
    w.Write(&crc, sizeof crc);
  }
  w.Commit();
  return w.digest();
}

}  // namespace cputrain::model
