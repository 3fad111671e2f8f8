// Mistral (Mistral AI): Llama's block and tensors, no biases, with sliding-window attention on
// every layer (sliding_window: 4096 for Mistral 7B v0.1, null from v0.2 on) and an optional
// head_dim apart from hidden / heads (Mistral NeMo).
//
// Hugging Face: MistralForCausalLM (modeling_mistral.py), Llama's tensor names.
#include <nlohmann/json.hpp>

#include "model/decoder_family.h"
#include "model/family.h"
#include "model/hf_config.h"
#include "model/limits.h"

namespace cputrain::model {
namespace {

using nlohmann::json;

std::vector<TensorInfo> MistralTensors(const Shape& s) { return DecoderTensors(s, {}); }

Shape MistralFromHf(const json& cfg, const std::string& path) {
  const char* family = "Mistral";
  hf::FixedKey(cfg, "hidden_act", {"silu"}, path, family);
  hf::FixedKey(cfg, "attention_dropout", {0}, path, family);
  Shape s = hf::DecoderKeys(cfg, path, Arch::kMistral, /*tied=*/false);
  hf::RopeScalingKey(cfg, path, family, {}, &s);
  // MistralConfig's sliding_window defaults to 4096; null turns it off. Every layer has it.
  if (!cfg.contains("sliding_window") || !cfg["sliding_window"].is_null()) {
    hf::WindowLayers(cfg, path, hf::IntKey(cfg, "sliding_window", path, kMaxSeqLen, 4096),
                     std::vector<bool>(s.L, true), &s);
  }
  return s;
}

json MistralToHf(const Shape& s) {
  json cfg = hf::DecoderKeysJson(s);
  cfg["architectures"] = {"MistralForCausalLM"};
  cfg["attention_dropout"] = 0.0;
  cfg["hidden_act"] = "silu";
  cfg["model_type"] = "mistral";
  cfg["sliding_window"] = s.window > 0 ? json(s.window) : json(nullptr);
  return cfg;
}

// Mistral 7B v0.3 (7,248,023,552 parameters, as transformers counts them): no sliding window
// (null from v0.2 on), theta 1e6, untied; for LoRA fine-tunes, one row of 512.
Preset Mistral7b() {
  Shape s{512, 32768, Shape::PadVocab(32768), 32, 32, 4096};
  s.arch = Arch::kMistral;
  s.NKV = 8;
  s.F = 14336;
  s.norm_eps = 1e-5f;
  s.rope_theta = 1000000.f;
  s.tied = false;
  s.attn_bias = s.mlp_bias = false;
  return {"mistral-7b-lora", s, 1, 512};
}

}  // namespace

extern const Family kMistralFamily = {
    .name = "mistral",
    .arch = Arch::kMistral,
    .kind = {.rms_norm = true, .swiglu = true, .rope = true},
    .tensors = MistralTensors,
    .problem = WindowOnEveryLayer,
    .from_config = DecoderFromConfig,
    .hf_model_type = "mistral",
    .hf_architecture = "MistralForCausalLM",
    .from_hf_config = MistralFromHf,
    .to_hf_config = MistralToHf,
    .hf_tensors = hf::LlamaHfTensors(),
    .hf_optional_prefix = "",
    .hf_ignored_suffixes = {".rotary_emb.inv_freq"},
    .hf_classify_architecture = "MistralForSequenceClassification",
    .lora_default_targets = {"q_proj", "v_proj"},  // PEFT's for mistral
    .presets = {Mistral7b()},
    .gguf = &kLlamaGguf,  // llama.cpp's "llama" (its attention has no sliding window)
};

}  // namespace cputrain::model
