// Qwen2 and Qwen2.5 (Qwen Team, Alibaba): Llama's block (RMSNorm, rotary embeddings, grouped-query
// attention, SwiGLU) with biases on the q, k and v projections (o_proj has none), and
// sliding-window attention on the layers from max_window_layers on when use_sliding_window is set
// (no released Qwen2.5 checkpoint sets it). The small ones tie the head (Qwen2.5-0.5B).
//
// Hugging Face: Qwen2ForCausalLM (modeling_qwen2.py), Llama's tensor names.
#include <nlohmann/json.hpp>

#include "model/decoder_family.h"
#include "model/family.h"
#include "model/hf_config.h"

namespace cputrain::model {
namespace {

using nlohmann::json;

std::vector<TensorInfo> Qwen2Tensors(const Shape& s) {
  return DecoderTensors(s, {.qkv_bias = true});
}

// model.*: Llama's keys; the q/k/v biases Qwen2 always has.
Shape Qwen2FromConfig(const Shape& keys) {
  Shape s = DecoderFromConfig(keys);
  s.attn_bias = true;
  return s;
}

Shape Qwen2FromHf(const json& cfg, const std::string& path) {
  const char* family = "Qwen2";
  hf::FixedKey(cfg, "hidden_act", {"silu"}, path, family);
  hf::FixedKey(cfg, "attention_dropout", {0}, path, family);
  Shape s = hf::DecoderKeys(cfg, path, Arch::kQwen2, /*tied=*/false);
  s.attn_bias = true;  // q, k, v: Qwen2Attention's bias=True
  hf::RopeScalingKey(cfg, path, family, {}, &s);
  hf::QwenWindows(cfg, path, &s);
  return s;
}

json Qwen2ToHf(const Shape& s) {
  json cfg = hf::DecoderKeysJson(s);
  cfg["architectures"] = {"Qwen2ForCausalLM"};
  cfg["attention_dropout"] = 0.0;
  cfg["hidden_act"] = "silu";
  cfg["model_type"] = "qwen2";
  hf::QwenWindowsJson(s, &cfg);
  return cfg;
}

// A Qwen2.5: q/k/v biases, rope_theta 1e6, rms_norm_eps 1e-6; B rows of T.
Preset Qwen25(const char* name, int L, int C, int NH, int NKV, int F, int V, bool tied, int B,
              int T) {
  Shape s{T, V, Shape::PadVocab(V), L, NH, C};
  s.arch = Arch::kQwen2;
  s.NKV = NKV;
  s.F = F;
  s.norm_eps = 1e-6f;
  s.rope_theta = 1000000.f;
  s.tied = tied;
  s.attn_bias = true;
  return {name, s, B, T};
}

// Qwen2.5-0.5B (config.json of Qwen/Qwen2.5-0.5B): 24 layers of 896, 14 heads over 2 KV heads
// (head size 64), MLP 4864, vocabulary 151,936, tied; 494,032,768 parameters (model card: 0.49B).
// B and T as the other decoders' presets.
Preset Qwen25_05b() { return Qwen25("qwen2.5-0.5b", 24, 896, 14, 2, 4864, 151936, true, 4, 128); }

// Qwen2.5-7B: 28 layers of 3584, 28 heads over 4, MLP 18944, vocabulary 152,064, untied;
// 7,615,616,512 parameters, as transformers counts them. For LoRA fine-tunes, one row of 512.
Preset Qwen25_7b() {
  return Qwen25("qwen2.5-7b-lora", 28, 3584, 28, 4, 18944, 152064, false, 1, 512);
}

void Qwen2GgufMetadata(const Shape& s, GgufWriter& w) { DecoderGgufKeys("qwen2", s, w); }

// llama.cpp's "qwen2": Llama's names with the q/k/v biases, each head's halves rotated as Hugging
// Face's (no permutation); its attention has no sliding window.
const GgufNames kQwen2Gguf = {
    .arch = "qwen2",
    .tensors = LlamaGgufTensors(/*rope_permute=*/false),
    .metadata = Qwen2GgufMetadata,
};

}  // namespace

extern const Family kQwen2Family = {
    .name = "qwen2",
    .arch = Arch::kQwen2,
    .kind = {.rms_norm = true, .swiglu = true, .rope = true},
    .tensors = Qwen2Tensors,
    .from_config = Qwen2FromConfig,
    .hf_model_type = "qwen2",
    .hf_architecture = "Qwen2ForCausalLM",
    .from_hf_config = Qwen2FromHf,
    .to_hf_config = Qwen2ToHf,
    .hf_tensors = hf::LlamaHfTensors(),
    .hf_optional_prefix = "",
    .hf_ignored_suffixes = {".rotary_emb.inv_freq"},
    .hf_classify_architecture = "Qwen2ForSequenceClassification",
    .lora_default_targets = {"q_proj", "v_proj"},  // PEFT's for qwen2
    .presets = {Qwen25_05b(), Qwen25_7b()},
    .gguf = &kQwen2Gguf,
};

}  // namespace cputrain::model
