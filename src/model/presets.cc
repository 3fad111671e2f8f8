#include "model/presets.h"

namespace cputrain::model {
namespace {

Preset Gpt2(const char* name, int L, int C, int NH, int V, int B, int T) {
  return {name, Shape{T, V, Shape::PadVocab(V), L, NH, C}, B, T};
}

// A Llama without biases (Hugging Face's defaults), tied as SmolLM2 and Llama 3.2 are.
Preset Llama(const char* name, int L, int C, int NH, int NKV, int F, int V, float theta, int B,
             int T) {
  Shape s{T, V, Shape::PadVocab(V), L, NH, C};
  s.arch = Arch::kLlama;
  s.NKV = NKV;
  s.F = F;
  s.rope_theta = theta;
  s.tied = true;
  s.attn_bias = s.mlp_bias = false;
  return {name, s, B, T};
}

// A BERT-shaped encoder with a span head (question answering), as transformers' config defaults
// make it: every bias, untied, maxT 512 positions, LayerNorm eps 1e-12, pad token 0, dropout
// 0.1 on the hidden states and the attention probabilities; B and T are run_qa.py's recipe
// (--per_device_train_batch_size 12 --max_seq_length 384).
Preset Encoder(const char* name, Arch arch, int L, int B, int T) {
  Shape s{512, 30522, Shape::PadVocab(30522), L, 12, 768};
  s.arch = arch;
  s.F = 3072;
  s.norm_eps = 1e-12f;
  s.tied = false;
  s.head = Head::kSpan;
  s.types = arch == Arch::kBert ? 2 : 0;  // BertConfig.type_vocab_size; DistilBERT has none
  s.pad_token = 0;
  s.hidden_dropout = s.attn_dropout = 0.1f;
  // BertForQuestionAnswering has no dropout before qa_outputs; DistilBERT's qa_dropout is 0.1.
  s.head_dropout = arch == Arch::kDistilBert ? 0.1f : 0.f;
  return {name, s, B, T};
}

}  // namespace

const std::vector<Preset>& Presets() {
  static const std::vector<Preset> all = [] {
    std::vector<Preset> p = {Gpt2("tiny", 2, 128, 4, 256, 4, 64),
                             Gpt2("small", 6, 384, 6, 50257, 4, 256),
                             Gpt2("gpt2-124M", 12, 768, 12, 50257, 4, 128),
                             Llama("smollm2-135m", 30, 576, 9, 3, 1536, 49152, 100000.f, 4, 128),
                             Llama("llama-1b", 16, 2048, 32, 8, 8192, 128256, 500000.f, 1, 128)};
    RopeScaling& r = p.back().shape.rope_scaling;
    r.kind = RopeScaling::kLlama3;
    r.factor = 32;
    r.low_freq_factor = 1;
    r.high_freq_factor = 4;
    r.original_max_position = 8192;
    p.push_back(Encoder("bert-base-qa", Arch::kBert, 12, 12, 384));
    p.push_back(Encoder("distilbert-qa", Arch::kDistilBert, 6, 12, 384));
    return p;
  }();
  return all;
}

const Preset* FindPreset(const std::string& name) {
  for (const Preset& p : Presets())
    if (p.name == name) return &p;
  return nullptr;
}

std::string PresetNames() {
  std::string out;
  for (const Preset& p : Presets()) out += (out.empty() ? "" : ", ") + p.name;
  return out;
}

}  // namespace cputrain::model
