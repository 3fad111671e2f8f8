// Fuzz target: PEFT adapter directories (src/model/peft.h), the --adapter of train, eval,
// generate and export --merge.
//
// Input: one byte choosing the base ('g': a tiny GPT-2, else a tiny Llama; fuzz_dir.h), then
// adapter_config.json's text, a NUL, and adapter_model.safetensors' bytes (no NUL: no weights
// file). An adapter that OpenAdapter and LoadAdapter accept must fit its base and load finite
// values into exactly lora.layout().total() floats. A rejection is an InputError; anything else
// is a finding.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "fuzz_dir.h"
#include "model/checkpoint_path.h"
#include "model/peft.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using namespace cputrain;
  if (size == 0) return 0;
  const model::ParamLayout base(data[0] == 'g' ? fuzz::TinyGpt2() : fuzz::TinyLlama());
  const fuzz::Split in =
      fuzz::SplitAtNul(std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1));
  const fuzz::ScratchDir& dir = fuzz::ScratchDir::Fresh();
  dir.Write(model::kAdapterConfigFile, in.first);
  if (in.second) dir.Write(model::kAdapterFile, in.rest);
  try {
    const std::unique_ptr<model::Lora> lora = model::OpenAdapter(dir.path(), base);
    std::vector<float> params(lora->layout().total());
    model::LoadAdapter(dir.path(), *lora, params.data());
    for (float x : params) {
      if (!std::isfinite(x)) std::abort();  // LoadAdapter refuses what is not finite
    }
  } catch (const InputError&) {
  }
  return 0;
}
