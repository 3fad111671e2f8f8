#include "model/checkpoint.h"

#include <fmt/format.h>

#include <cstdint>
#include <string>

#include "common/error.h"
#include "common/files.h"
#include "model/hf_gpt2.h"

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

void CheckMagicAndVersion(const std::string& path, const int32_t* h) {
  if (h[0] != kCheckpointMagic) {
    std::string hint = "pass a checkpoint written by cputrain-numa train or llm.c";
    if (h[0] == kTokenFileMagic)
      hint = "this is a token file (magic 20240520): use it as data.train";
    if (h[0] == kDebugStateMagic) hint = "this is an llm.c debug-state file, not a checkpoint";
    throw InputError(
        fmt::format("checkpoint '{}': bad magic {} (expected {})", path, h[0], kCheckpointMagic),
        hint);
  }
  if (h[1] != kCheckpointVersion) {
    throw InputError(
        fmt::format("checkpoint '{}': version {} is not supported (expected {}, fp32)", path, h[1],
                    kCheckpointVersion),
        h[1] == 5 ? "version 5 is llm.c's bf16 checkpoint: export an fp32 one (llm.c writes both)"
                  : "re-create the checkpoint with cputrain-numa train or llm.c");
  }
}

// Reads and validates the header of `f`, leaving it positioned at the first tensor. Every size
// is judged before anything is allocated: the shape against model/limits.h (so no size derived
// from it overflows), then the size it implies against the file's.
Shape ReadHeader(InputFile& f) {
  const std::string& path = f.path();
  if (f.size() < kHeaderBytes) {
    throw InputError(fmt::format("checkpoint '{}' is {} bytes, shorter than the {}-byte header",
                                 path, f.size(), kHeaderBytes),
                     "the file is not an llm.c checkpoint or is truncated");
  }
  int32_t h[kHeaderInts];
  ReadExact(f, h, kHeaderBytes);
  CheckMagicAndVersion(path, h);
  Shape s;
  s.maxT = h[2];
  s.V = h[3];
  s.L = h[4];
  s.NH = h[5];
  s.C = h[6];
  s.Vp = h[7];
  const std::string problem = s.Problem();
  if (!problem.empty()) {
    throw InputError(fmt::format("checkpoint '{}': its header describes an impossible model ({}): "
                                 "{}",
                                 path, s.ToString(), problem),
                     "the file is damaged or not an llm.c checkpoint");
  }
  // At most 1024 + 4 * 2^40 bytes for a valid shape: no overflow.
  const std::uint64_t expect = kHeaderBytes + s.ParamCount() * sizeof(float);
  if (f.size() != expect) {
    throw InputError(fmt::format("checkpoint '{}' is {} bytes but its header ({}) needs {}", path,
                                 f.size(), s.ToString(), expect),
                     f.size() < expect ? "the file is truncated: copy or re-create it"
                                       : "the file has trailing data: it is damaged");
  }
  return s;
}

}  // namespace

Shape ReadCheckpointShape(const std::string& path) {
  if (IsHfDir(path)) return ReadHfShape(path);
  InputFile f = InputFile::Open(path, kCheckpointKind);
  return ReadHeader(f);
}

void LoadCheckpoint(const std::string& path, const ParamLayout& layout, float* params) {
  if (IsHfDir(path)) return LoadHf(path, layout, params);
  InputFile f = InputFile::Open(path, kCheckpointKind);
  const Shape s = ReadHeader(f);
  if (!(s == layout.shape())) {
    throw InputError(fmt::format("checkpoint '{}' has shape {}, expected {}", path, s.ToString(),
                                 layout.shape().ToString()),
                     "use a checkpoint of this model");
  }
  // The file is tensor-major; our buffer is layer-major. Read each tensor copy into place.
  for (int t = 0; t < kNumTensors; ++t) {
    const TensorInfo& info = layout.info(static_cast<Tensor>(t));
    for (int l = 0; l < (info.per_layer ? s.L : 1); ++l) {
      ReadExact(f, params + layout.offset(static_cast<Tensor>(t), l), info.numel * sizeof(float));
    }
  }
}

void SaveCheckpoint(const std::string& path, const ParamLayout& layout, const float* params) {
  const Shape& s = layout.shape();
  int32_t h[kHeaderInts] = {};
  h[0] = kCheckpointMagic;
  h[1] = kCheckpointVersion;
  h[2] = s.maxT;
  h[3] = s.V;
  h[4] = s.L;
  h[5] = s.NH;
  h[6] = s.C;
  h[7] = s.Vp;
  AtomicFileWriter w(path);
  w.Write(h, kHeaderBytes);
  for (int t = 0; t < kNumTensors; ++t) {
    const TensorInfo& info = layout.info(static_cast<Tensor>(t));
    for (int l = 0; l < (info.per_layer ? s.L : 1); ++l) {
      w.Write(params + layout.offset(static_cast<Tensor>(t), l), info.numel * sizeof(float));
    }
  }
  w.Commit();
}

}  // namespace cputrain::model
