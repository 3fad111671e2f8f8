#include "bench/models.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/error.h"

namespace cputrain::bench {

std::string ModelPreset::Describe() const {
  return fmt::format("L={} C={} NH={} V={} B={} T={}", L, C, NH, V, B, T);
}

void ModelPreset::ApplyTo(Config* config) const {
  config->model.init_from.clear();
  config->model.layers = L;
  config->model.channels = C;
  config->model.heads = NH;
  config->model.vocab_size = V;
  config->model.max_seq_len = maxT;
  config->data.batch_size = B;
  config->data.seq_len = T;
}

std::string ModelNames() { return "tiny, small, gpt2-124M, config"; }

ModelPreset ResolveModel(const std::string& name, const Config& config) {
  if (name == "tiny") return {"tiny", 2, 128, 4, 256, 4, 64, 64};
  if (name == "small") return {"small", 6, 384, 6, 50257, 4, 256, 256};
  if (name == "gpt2-124M") return {"gpt2-124M", 12, 768, 12, 50257, 4, 128, 128};
  if (name == "config") {
    if (!config.model.init_from.empty()) {
      throw InputError(
          "--model config: the config starts from a checkpoint (model.init_from), whose shape "
          "the benchmark does not read",
          "give the shape with --set model.layers=... or pick a preset: " + ModelNames());
    }
    return {"config",
            config.model.layers,
            config.model.channels,
            config.model.heads,
            config.model.vocab_size,
            config.data.batch_size,
            config.data.seq_len,
            std::max(config.model.max_seq_len, config.data.seq_len)};
  }
  throw InputError(fmt::format("unknown model '{}'", name), "use one of: " + ModelNames());
}

}  // namespace cputrain::bench
