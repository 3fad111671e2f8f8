// Fuzz target: a sharded Hugging Face directory (src/model/hf.h): model.safetensors.index.json
// and the shards its weight_map names, loaded as the tiny Llama of fuzz_dir.h (whose config.json
// the target writes).
//
// Input: the index's text, a NUL, a little-endian uint32 n, then the bytes of
// model-00001-of-00002.safetensors (n, or what is left) and of model-00002-of-00002.safetensors
// (the rest). A directory LoadHf accepts must fill the model with finite values; a tensor stored
// in both shards is refused (issue 32). A rejection is an InputError; anything else is a finding.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "fuzz_dir.h"
#include "model/hf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using namespace cputrain;
  const model::ParamLayout layout(fuzz::TinyLlama());
  const fuzz::Split in =
      fuzz::SplitAtNul(std::string_view(reinterpret_cast<const char*>(data), size));
  const fuzz::ScratchDir& dir = fuzz::ScratchDir::Fresh();
  dir.Write("config.json", model::HfConfigJson(layout.shape()));
  dir.Write(model::kHfIndexFile, in.first);
  std::string_view rest = in.rest;
  uint32_t n = 0;
  if (rest.size() >= sizeof n) {
    std::memcpy(&n, rest.data(), sizeof n);
    rest.remove_prefix(sizeof n);
  }
  const std::size_t first = std::min<std::size_t>(n, rest.size());
  dir.Write("model-00001-of-00002.safetensors", rest.substr(0, first));
  dir.Write("model-00002-of-00002.safetensors", rest.substr(first));
  std::vector<float> params(layout.total());
  try {
    model::LoadHf(dir.path(), layout, params.data());
    for (float x : params) {
      if (!std::isfinite(x)) std::abort();  // LoadHf refuses what is not finite
    }
  } catch (const InputError&) {
  }
  return 0;
}
