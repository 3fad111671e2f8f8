// Phi-3 (Microsoft; Phi-3-mini, Phi-3-medium): Llama's block with the q|k|v projections fused in
// one qkv_proj and the gate|up ones in one gate_up_proj — our own fused products, row for row —,
// no biases, an untied head, rotary embeddings over the whole head (partial_rotary_factor 1), an
// optional sliding window on every layer, and pad token 32000 by default, whose embedding row
// gets no gradient. The 128k models' "longrope" scaling is refused by name until it is needed.
//
// Hugging Face: Phi3ForCausalLM (modeling_phi3.py): self_attn.qkv_proj, self_attn.o_proj,
// mlp.gate_up_proj, mlp.down_proj, input_layernorm, post_attention_layernorm.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "model/decoder_family.h"
#include "model/family.h"
#include "model/gguf_file.h"
#include "model/hf_config.h"
#include "model/limits.h"

namespace cputrain::model {
namespace {

using nlohmann::json;

std::vector<TensorInfo> Phi3Tensors(const Shape& s) { return DecoderTensors(s, {}); }

Shape Phi3FromHf(const json& cfg, const std::string& path) {
  const char* family = "Phi-3";
  hf::FixedKey(cfg, "hidden_act", {"silu"}, path, family);
  for (const char* key : {"attention_dropout", "resid_pdrop", "embd_pdrop"})
    hf::FixedKey(cfg, key, {0}, path, family);
  if (cfg.contains("rope_scaling") && cfg["rope_scaling"].is_object()) {
    const nlohmann::json& r = cfg["rope_scaling"];
    std::string type;  // (a type that is not a string: RopeScalingKey's refusal, below)
    for (const char* key : {"type", "rope_type"})
      if (r.contains(key) && r[key].is_string()) type = r[key].get<std::string>();
    if (type == "longrope" || type == "su" || type == "yarn") {
      hf::BadConfig(path,
                    fmt::format("rope_scaling type '{}' (Phi-3's long-context scaling) is not "
                                "supported",
                                type),
                    "fine-tune a 4k-context Phi-3 (rope_scaling null): the long-context models' "
                    "rescaled frequencies (also below original_max_position_embeddings) are not "
                    "implemented");
    }
  }
  Shape s = hf::DecoderKeys(cfg, path, Arch::kPhi3, /*tied=*/false);
  s.norm_eps = static_cast<float>(hf::FloatKey(cfg, "rms_norm_eps", path, 1e-5));
  if (!cfg.contains("pad_token_id") && s.V > 32000) s.pad_token = 32000;  // Phi3Config's
  hf::RopeScalingKey(cfg, path, family, {}, &s);
  if (cfg.contains("sliding_window") && !cfg["sliding_window"].is_null()) {
    hf::WindowLayers(cfg, path, hf::IntKey(cfg, "sliding_window", path, kMaxSeqLen),
                     std::vector<bool>(s.L, true), &s);
  }
  return s;
}

json Phi3ToHf(const Shape& s) {
  json cfg = hf::DecoderKeysJson(s);
  cfg["architectures"] = {"Phi3ForCausalLM"};
  cfg["attention_dropout"] = 0.0;
  cfg["embd_pdrop"] = 0.0;
  cfg["hidden_act"] = "silu";
  cfg["model_type"] = "phi3";
  cfg["original_max_position_embeddings"] = s.maxT;
  cfg["partial_rotary_factor"] = 1.0;
  cfg["pad_token_id"] = s.pad_token >= 0 ? json(s.pad_token) : json(nullptr);
  cfg["resid_pdrop"] = 0.0;
  cfg["sliding_window"] = s.window > 0 ? json(s.window) : json(nullptr);
  return cfg;
}

// convert_hf_to_gguf.py's Phi3MiniModel: its own keys (no key_length / value_length); the window
// is written as convert does, and llama.cpp reads it and then turns Phi-3's windows off.
void Phi3GgufMetadata(const Shape& s, GgufWriter& w) {
  w.Uint32("phi3.rope.scaling.original_context_length", s.maxT);
  w.Uint32("phi3.attention.head_count_kv", s.kv_heads());
  w.Float32("phi3.attention.layer_norm_rms_epsilon", s.norm_eps);
  w.Uint32("phi3.rope.dimension_count", s.head_size());
  w.Float32("phi3.rope.freq_base", s.rope_theta);
  w.Uint32("phi3.attention.sliding_window", s.window);
}

std::string Phi3GgufProblem(const Shape& s) {
  return s.attn_width() != s.C ? "head_dim apart from hidden_size / num_attention_heads (it "
                                 "derives the head size from them)"
                               : "";
}

// llama.cpp's "phi3": our fused q|k|v and gate|up products as they are (attn_qkv, ffn_up), each
// head's halves rotated as Hugging Face's.
const GgufNames kPhi3Gguf = {
    .arch = "phi3",
    .tensors = {{kWte, "token_embd.weight"},
                {kLn1w, "blk.{}.attn_norm.weight"},
                {kQkvw, "blk.{}.attn_qkv.weight"},
                {kAttprojw, "blk.{}.attn_output.weight"},
                {kLn2w, "blk.{}.ffn_norm.weight"},
                {kFcw, "blk.{}.ffn_up.weight"},
                {kFcprojw, "blk.{}.ffn_down.weight"},
                {kLnfw, "output_norm.weight"},
                {kLmHead, "output.weight"}},
    .metadata = Phi3GgufMetadata,
    .problem = Phi3GgufProblem,
};

}  // namespace

extern const Family kPhi3Family = {
    .name = "phi3",
    .arch = Arch::kPhi3,
    .kind = {.rms_norm = true, .swiglu = true, .rope = true},
    .tensors = Phi3Tensors,
    .problem = WindowOnEveryLayer,
    .from_config = DecoderFromConfig,
    .hf_model_type = "phi3",
    .hf_architecture = "Phi3ForCausalLM",
    .from_hf_config = Phi3FromHf,
    .to_hf_config = Phi3ToHf,
    .hf_tensors = {{kWte, "model.embed_tokens.weight"},
                   {kLn1w, "model.layers.{}.input_layernorm.weight"},
                   {kQkvw, "model.layers.{}.self_attn.qkv_proj.weight"},
                   {kAttprojw, "model.layers.{}.self_attn.o_proj.weight"},
                   {kLn2w, "model.layers.{}.post_attention_layernorm.weight"},
                   {kFcw, "model.layers.{}.mlp.gate_up_proj.weight"},
                   {kFcprojw, "model.layers.{}.mlp.down_proj.weight"},
                   {kLnfw, "model.norm.weight"},
                   {kLmHead, "lm_head.weight"}},
    .hf_optional_prefix = "",
    .hf_ignored_suffixes = {".rotary_emb.inv_freq"},
    .hf_classify_architecture = "Phi3ForSequenceClassification",
    // PEFT has no default for phi3; ours adapts the fused q|k|v projection (what q_proj and
    // v_proj are in the other families, and k with them).
    .lora_default_targets = {"qkv_proj"},
    .gguf = &kPhi3Gguf,
};

}  // namespace cputrain::model
