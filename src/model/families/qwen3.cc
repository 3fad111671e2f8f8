// Qwen3 (Qwen Team, Alibaba): Llama's block with an RMSNorm over each query and key head before
// the rotary embedding (q_norm, k_norm: one weight of the head size each), its own head size
// (head_dim 128 by default: Qwen3-0.6B's 16 heads of 128 over a residual width of 1024), optional
// biases on q, k, v and o (attention_bias), and Qwen2's sliding-window switches.
//
// Hugging Face: Qwen3ForCausalLM (modeling_qwen3.py), Llama's tensor names plus
// self_attn.q_norm / k_norm.
#include <nlohmann/json.hpp>

#include "model/decoder_family.h"
#include "model/family.h"
#include "model/hf_config.h"

namespace cputrain::model {
namespace {

using nlohmann::json;

std::vector<TensorInfo> Qwen3Tensors(const Shape& s) {
  return DecoderTensors(s, {.qkv_bias = s.attn_bias, .out_bias = s.attn_bias, .qk_norm = true});
}

Shape Qwen3FromHf(const json& cfg, const std::string& path) {
  const char* family = "Qwen3";
  hf::FixedKey(cfg, "hidden_act", {"silu"}, path, family);
  hf::FixedKey(cfg, "attention_dropout", {0}, path, family);
  Shape s = hf::DecoderKeys(cfg, path, Arch::kQwen3, /*tied=*/false, /*default_head_dim=*/128);
  s.attn_bias = hf::BoolKey(cfg, "attention_bias", path, false);
  hf::RopeScalingKey(cfg, path, family, {}, &s);
  hf::QwenWindows(cfg, path, &s);
  return s;
}

json Qwen3ToHf(const Shape& s) {
  json cfg = hf::DecoderKeysJson(s);
  cfg["architectures"] = {"Qwen3ForCausalLM"};
  cfg["attention_bias"] = s.attn_bias;
  cfg["attention_dropout"] = 0.0;
  cfg["hidden_act"] = "silu";
  cfg["model_type"] = "qwen3";
  hf::QwenWindowsJson(s, &cfg);
  return cfg;
}

// model.*: Llama's keys (head_dim among them), attention without biases.
Shape Qwen3FromConfig(const Shape& keys) { return DecoderFromConfig(keys); }

// Qwen3-0.6B (config.json of Qwen/Qwen3-0.6B): 28 layers of 1024, 16 heads of 128 over 8 KV
// heads, MLP 3072, vocabulary 151,936, tied, rope_theta 1e6, rms_norm_eps 1e-6; 596,049,920
// parameters (model card: 0.6B, 0.44B without the embedding).
Preset Qwen3_06b() {
  Shape s{128, 151936, Shape::PadVocab(151936), 28, 16, 1024};
  s.arch = Arch::kQwen3;
  s.NKV = 8;
  s.F = 3072;
  s.HD = 128;
  s.norm_eps = 1e-6f;
  s.rope_theta = 1000000.f;
  s.tied = true;
  s.attn_bias = s.mlp_bias = false;
  return {"qwen3-0.6b", s, 4, 128};
}

void Qwen3GgufMetadata(const Shape& s, GgufWriter& w) { DecoderGgufKeys("qwen3", s, w); }

std::string Qwen3GgufProblem(const Shape& s) {
  return s.attn_bias ? "attention_bias: llama.cpp's qwen3 has no bias on the attention output "
                       "(o_proj)"
                     : "";
}

// llama.cpp's "qwen3": Qwen2's names and the per-head q/k norms (attn_q_norm, attn_k_norm); no
// sliding window.
const GgufNames kQwen3Gguf = {
    .arch = "qwen3",
    .tensors = LlamaGgufTensors(/*rope_permute=*/false),
    .metadata = Qwen3GgufMetadata,
    .problem = Qwen3GgufProblem,
};

}  // namespace

extern const Family kQwen3Family = {
    .name = "qwen3",
    .arch = Arch::kQwen3,
    .kind = {.rms_norm = true, .swiglu = true, .rope = true, .qk_norm = true},
    .tensors = Qwen3Tensors,
    .from_config = Qwen3FromConfig,
    .hf_model_type = "qwen3",
    .hf_architecture = "Qwen3ForCausalLM",
    .from_hf_config = Qwen3FromHf,
    .to_hf_config = Qwen3ToHf,
    .hf_tensors = hf::LlamaHfTensors(),
    .hf_optional_prefix = "",
    .hf_ignored_suffixes = {".rotary_emb.inv_freq"},
    .hf_classify_architecture = "Qwen3ForSequenceClassification",
    .lora_default_targets = {"q_proj", "v_proj"},  // PEFT's for qwen3
    .presets = {Qwen3_06b()},
    .gguf = &kQwen3Gguf,
};

}  // namespace cputrain::model
