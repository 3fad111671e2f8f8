#include "model/checkpoint.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include "common/error.h"
#include "common/files.h"

namespace cputrain::model {
namespace {

constexpr std::size_t kHeaderInts = 256;
constexpr std::size_t kHeaderBytes = kHeaderInts * sizeof(int32_t);
constexpr int kTokenFileMagic = 20240520;  // data/token_file.h; named here for the hint
constexpr int kDebugStateMagic = 20240327;

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

File OpenForRead(const std::string& path) {
  File f(std::fopen(path.c_str(), "rb"));
  if (!f) {
    throw InputError(fmt::format("checkpoint '{}': cannot open: {}", path, std::strerror(errno)),
                     "check model.init_from / --checkpoint");
  }
  return f;
}

void ReadExact(std::FILE* f, void* dst, std::size_t bytes, const std::string& path) {
  if (std::fread(dst, 1, bytes, f) != bytes) {
    throw InputError(fmt::format("checkpoint '{}' is truncated", path),
                     "the file is incomplete (an interrupted copy?); copy or re-create it");
  }
}

}  // namespace

Shape ReadCheckpointShape(const std::string& path) {
  File f = OpenForRead(path);
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec || size < kHeaderBytes) {
    throw InputError(fmt::format("checkpoint '{}' is {} bytes, shorter than the {}-byte header",
                                 path, ec ? 0 : size, kHeaderBytes),
                     "the file is not an llm.c checkpoint or is truncated");
  }
  int32_t h[kHeaderInts];
  ReadExact(f.get(), h, kHeaderBytes, path);
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
  Shape s;
  s.maxT = h[2];
  s.V = h[3];
  s.L = h[4];
  s.NH = h[5];
  s.C = h[6];
  s.Vp = h[7];
  if (s.maxT < 1 || s.V < 1 || s.L < 1 || s.NH < 1 || s.C < 1 || s.Vp < s.V || s.C % s.NH != 0 ||
      s.V > 65536) {
    throw InputError(fmt::format("checkpoint '{}': its header describes an impossible model ({})",
                                 path, s.ToString()),
                     "the file is damaged or not an llm.c checkpoint");
  }
  const std::size_t expect = kHeaderBytes + ParamLayout(s).total() * sizeof(float);
  if (size != expect) {
    throw InputError(fmt::format("checkpoint '{}' is {} bytes but its header ({}) needs {}", path,
                                 size, s.ToString(), expect),
                     size < expect ? "the file is truncated: copy or re-create it"
                                   : "the file has trailing data: it is damaged");
  }
  return s;
}

void LoadCheckpoint(const std::string& path, const ParamLayout& layout, float* params) {
  const Shape s = ReadCheckpointShape(path);
  if (!(s == layout.shape())) {
    throw InputError(fmt::format("checkpoint '{}' has shape {}, expected {}", path, s.ToString(),
                                 layout.shape().ToString()),
                     "use a checkpoint of this model");
  }
  File f = OpenForRead(path);
  std::fseek(f.get(), static_cast<long>(kHeaderBytes), SEEK_SET);
  // The file is tensor-major; our buffer is layer-major. Read each tensor copy into place.
  for (int t = 0; t < kNumTensors; ++t) {
    const TensorInfo& info = layout.info(static_cast<Tensor>(t));
    for (int l = 0; l < (info.per_layer ? s.L : 1); ++l) {
      ReadExact(f.get(), params + layout.offset(static_cast<Tensor>(t), l),
                info.numel * sizeof(float), path);
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
