// Llama (Llama 2/3, TinyLlama, SmolLM2, and Mistral-shaped models without a sliding window):
// RMSNorm, rotary embeddings (Hugging Face's rotate_half convention; llama3 rope_scaling),
// grouped-query attention, a SwiGLU MLP, no biases unless attention_bias / mlp_bias, the LM head
// tied to the embedding or not.
//
// Hugging Face: LlamaForCausalLM. q_proj, k_proj and v_proj are the row parts of our fused qkvw
// ([NH | NKV | NKV] heads), gate_proj and up_proj those of fcw ([F | F]); every weight is
// (out, in) as ours, so nothing is transposed or permuted (the rotary convention is HF's own).
// The names are the lineage's (hf_config.h, LlamaHfTensors), which Mistral and Qwen share.

#include <cmath>
#include <nlohmann/json.hpp>

#include "model/decoder_family.h"
#include "model/family.h"
#include "model/gguf_file.h"
#include "model/hf_config.h"

namespace cputrain::model {
namespace {

std::vector<TensorInfo> LlamaTensors(const Shape& s) {
  return DecoderTensors(s,
                        {.qkv_bias = s.attn_bias, .out_bias = s.attn_bias, .mlp_bias = s.mlp_bias});
}

// A named Llama without biases (Hugging Face's defaults), tied as SmolLM2 and Llama 3.2 are; B
// is the global batch, maxT is T.
Preset LlamaPreset(const char* name, int L, int C, int NH, int NKV, int F, int V, float theta,
                   int B, int T) {
  Shape s{T, V, Shape::PadVocab(V), L, NH, C};
  s.arch = Arch::kLlama;
  s.NKV = NKV;
  s.F = F;
  s.rope_theta = theta;
  s.tied = true;
  s.attn_bias = s.mlp_bias = false;
  return {name, s, B, T};
}

// Llama 3's rope scaling ("rope_type": "llama3"): factor, then 1 / 4 / 8192 in every release.
RopeScaling Llama3Rope(float factor) {
  RopeScaling r;
  r.kind = RopeScaling::kLlama3;
  r.factor = factor;
  r.low_freq_factor = 1;
  r.high_freq_factor = 4;
  r.original_max_position = 8192;
  return r;
}

// Llama 3.2 1B: tied, theta 5e5, llama3 rope scaling 32/1/4/8192.
Preset Llama1b() {
  Preset p = LlamaPreset("llama-1b", 16, 2048, 32, 8, 8192, 128256, 500000.f, 1, 128);
  p.shape.rope_scaling = Llama3Rope(32);
  return p;
}

// Llama 3.1 8B (8,030,261,248 parameters, as transformers counts them): untied, theta 5e5,
// llama3 rope scaling 8/1/4/8192; for LoRA fine-tunes (a full one needs ~130 GB), one row of 512.
Preset Llama31_8b() {
  Preset p = LlamaPreset("llama3-8b-lora", 32, 4096, 32, 8, 14336, 128256, 500000.f, 1, 512);
  p.shape.tied = false;
  p.shape.norm_eps = 1e-5f;
  p.shape.rope_scaling = Llama3Rope(8);
  return p;
}

// SmolLM2-135M with a sequence classifier (LlamaForSequenceClassification: the last real token
// through score, 2 labels; pad_token_id 0): a small decoder classifier or reward model, B=8 T=128.
Preset SmolLm2Classifier() {
  Preset p = LlamaPreset("smollm2-135m-cls", 30, 576, 9, 3, 1536, 49152, 100000.f, 8, 128);
  p.shape.head = Head::kClassify;
  p.shape.labels = 2;
  p.shape.pad_token = 0;
  return p;
}

Shape LlamaFromHf(const nlohmann::json& cfg, const std::string& path) {
  const char* family = "Llama";
  hf::FixedKey(cfg, "hidden_act", {"silu"}, path, family);
  hf::FixedKey(cfg, "pretraining_tp", {1}, path, family);
  hf::FixedKey(cfg, "sliding_window", {nullptr}, path, family);
  // The lineage's keys (head_dim, pad_token_id among them), untied by default.
  Shape s = hf::DecoderKeys(cfg, path, Arch::kLlama, /*tied=*/false);
  s.attn_bias = hf::BoolKey(cfg, "attention_bias", path, false);
  s.mlp_bias = hf::BoolKey(cfg, "mlp_bias", path, false);
  hf::RopeScalingKey(cfg, path, family, {RopeScaling::kLlama3}, &s);
  return s;
}

nlohmann::json LlamaToHf(const Shape& s) {
  nlohmann::json cfg = hf::DecoderKeysJson(s);
  cfg["architectures"] = {"LlamaForCausalLM"};
  cfg["attention_bias"] = s.attn_bias;
  cfg["attention_dropout"] = 0.0;
  cfg["hidden_act"] = "silu";
  cfg["mlp_bias"] = s.mlp_bias;
  cfg["model_type"] = "llama";
  cfg["pretraining_tp"] = 1;
  return cfg;
}

// Llama 3's rope_freqs.weight: the factor each rotary frequency is divided by, computed as
// convert_hf_to_gguf.py's LlamaModel.generate_extra_tensors does (fp32, as its torch tensors).
std::vector<float> Llama3RopeFactors(const Shape& s) {
  const RopeScaling& r = s.rope_scaling;
  const int hs = s.head_size();
  const float low =
      static_cast<float>(static_cast<double>(r.original_max_position) / r.low_freq_factor);
  const float high =
      static_cast<float>(static_cast<double>(r.original_max_position) / r.high_freq_factor);
  std::vector<float> f;
  for (int i = 0; i < hs; i += 2) {
    const float freq = 1.0f / std::pow(s.rope_theta, static_cast<float>(i) / hs);
    const float wavelen = static_cast<float>(2 * M_PI) / freq;
    if (wavelen < high) {
      f.push_back(1.0f);
    } else if (wavelen > low) {
      f.push_back(r.factor);
    } else {
      const float smooth =
          (static_cast<float>(r.original_max_position) / wavelen - r.low_freq_factor) /
          (r.high_freq_factor - r.low_freq_factor);
      f.push_back(1.0f / ((1.0f - smooth) / r.factor + smooth));
    }
  }
  return f;
}

void LlamaGgufMetadata(const Shape& s, GgufWriter& w) {
  DecoderGgufKeys("llama", s, w);
  w.Uint32("llama.vocab_size", s.V);
  w.Uint32("llama.rope.dimension_count", s.head_size());
  if (s.rope_scaling.kind == RopeScaling::kLlama3) {
    const std::vector<float> f = Llama3RopeFactors(s);
    w.Tensor("rope_freqs.weight", {f.size()}, GgmlType::kF32, [f](std::vector<std::uint8_t>* out) {
      const auto* p = reinterpret_cast<const std::uint8_t*>(f.data());
      out->insert(out->end(), p, p + f.size() * sizeof(float));
    });
  }
}

}  // namespace

// llama.cpp's "llama" architecture: q, k, v, gate and up apart; q and k rows in llama.cpp's
// rotary order (GgufTensor::rope_permute); a tied head is token_embd (no output.weight).
extern const GgufNames kLlamaGguf = {
    .arch = "llama",
    .tensors = LlamaGgufTensors(/*rope_permute=*/true),
    .metadata = LlamaGgufMetadata,
};

extern const Family kLlamaFamily = {
    .name = "llama",
    .arch = Arch::kLlama,
    .kind = {.rms_norm = true, .swiglu = true, .rope = true},
    .tensors = LlamaTensors,
    .from_config = DecoderFromConfig,
    .hf_model_type = "llama",
    .hf_architecture = "LlamaForCausalLM",
    .from_hf_config = LlamaFromHf,
    .to_hf_config = LlamaToHf,
    .hf_tensors = hf::LlamaHfTensors(),
    .hf_optional_prefix = "",
    .hf_ignored_suffixes = {".rotary_emb.inv_freq"},
    .hf_classify_architecture = "LlamaForSequenceClassification",
    .lora_default_targets = {"q_proj", "v_proj"},
    .presets = {LlamaPreset("smollm2-135m", 30, 576, 9, 3, 1536, 49152, 100000.f, 4, 128),
                Llama1b(), SmolLm2Classifier(), Llama31_8b()},
    .gguf = &kLlamaGguf,
};

}  // namespace cputrain::model
