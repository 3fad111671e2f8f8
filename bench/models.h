// The model sizes the gemm and train suites benchmark: the named presets of model/presets.h, or
// the config's own model ("config": its model.* and data.batch_size / data.seq_len).
//
// B is the global batch (sequences per step), split over the replica groups as in training.
#pragma once

#include <string>

#include "config/config.h"
#include "model/shape.h"

namespace cputrain::bench {

struct ModelPreset {
  std::string name;
  model::Shape shape;
  int B = 0, T = 0;

  // "llama L=30 C=576 NH=9 NKV=3 F=1536 V=49152 B=4 T=128",
  // "bert L=12 C=768 NH=12 F=3072 types=2 head=qa V=30522 B=12 T=384"
  std::string Describe() const;
  // Writes the preset into a config (model.*, no checkpoint; data.batch_size and data.seq_len).
  void ApplyTo(Config* config) const;
};

// The preset called `name` ("config": from `config`). Throws InputError naming the valid names.
ModelPreset ResolveModel(const std::string& name, const Config& config);

// "tiny, small, gpt2-124M, smollm2-135m, llama-1b, bert-base-qa, distilbert-qa, config": for
// help texts.
std::string ModelNames();

}  // namespace cputrain::bench
