// The model sizes the gemm and train suites benchmark: named presets, or the config's own model.
//
//   tiny       L=2,  C=128, NH=4,  V=256,   B=4, T=64    (smoke runs: --quick)
//   small      L=6,  C=384, NH=6,  V=50257, B=4, T=256
//   gpt2-124M  L=12, C=768, NH=12, V=50257, B=4, T=128   (GPT-2 small)
//   config     the loaded config's model.* and data.batch_size / data.seq_len
//
// B is the global batch (sequences per step), split over the replica groups as in training.
#pragma once

#include <string>
#include <vector>

#include "config/config.h"
#include "model/gpt2.h"

namespace cputrain::bench {

struct ModelPreset {
  std::string name;
  int L = 0, C = 0, NH = 0, V = 0, B = 0, T = 0;
  int maxT = 0;  // positions of wpe: T for the presets (as bench/pytorch/train_gpt2.py has it)

  model::Shape shape() const { return {maxT, V, model::Shape::PadVocab(V), L, NH, C}; }
  // "L=12 C=768 NH=12 V=50257 B=4 T=128"
  std::string Describe() const;
  // Writes the preset into a config (model.*, no checkpoint; data.batch_size and data.seq_len).
  void ApplyTo(Config* config) const;
};

// The preset called `name` ("config": from `config`). Throws InputError naming the valid names.
ModelPreset ResolveModel(const std::string& name, const Config& config);

// "tiny, small, gpt2-124M, config": for help texts.
std::string ModelNames();

}  // namespace cputrain::bench
