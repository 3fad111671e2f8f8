// model/: named model shapes — the sizes the benchmarks run and configs can start from. Each
// family lists its own (family.h, Family::presets; src/model/families/); today:
//
//   tiny          gpt2  L=2  C=128  NH=4                 V=256     B=4 T=64  (smoke runs)
//   small         gpt2  L=6  C=384  NH=6                 V=50257   B=4 T=256
//   gpt2-124M     gpt2  L=12 C=768  NH=12                V=50257   B=4 T=128 (GPT-2 small)
//   smollm2-135m  llama L=30 C=576  NH=9  NKV=3 F=1536   V=49152   B=4 T=128 (tied; theta 1e5)
//   llama-1b      llama L=16 C=2048 NH=32 NKV=8 F=8192   V=128256  B=1 T=128 (Llama 3.2 1B:
//                 tied, theta 5e5, llama3 rope scaling 32/1/4/8192)
//   smollm2-135m-cls  the same with a classifier (LlamaForSequenceClassification, 2 labels,
//                 pad token 0): B=8 T=128
//   bert-base-qa  bert  L=12 C=768  NH=12 F=3072 types=2 V=30522 B=12 T=384 (bert-base-uncased
//                 with a span head: BertForQuestionAnswering; run_qa.py's batch and length)
//   bert-base-cls the same with a classifier (BertForSequenceClassification, 2 labels): B=32
//                 T=128, run_glue.py's usual batch and length
//   distilbert-qa distilbert L=6 C=768 NH=12 F=3072  V=30522   B=12 T=384 (distilbert-base-
//                 uncased: DistilBertForQuestionAnswering)
// The encoders: maxT 512 (their position tables), LayerNorm eps 1e-12, pad token 0, dropout 0.1
// on hidden states and attention probabilities (DistilBERT's qa_dropout 0.1 too), as their
// Hugging Face configs.
//
// B is the global batch (sequences per step). maxT is T for the decoders: the position tables
// cover the run.
#pragma once

#include <string>
#include <vector>

#include "model/shape.h"

namespace cputrain::model {

struct Preset {
  std::string name;
  Shape shape;
  int B = 0, T = 0;
};

// Every family's presets, in registry order.
const std::vector<Preset>& Presets();
// The preset called `name`, or null.
const Preset* FindPreset(const std::string& name);
// "tiny, small, gpt2-124M, smollm2-135m, llama-1b, ...": for help texts.
std::string PresetNames();

}  // namespace cputrain::model
