// Gemma 3, text only (Google; gemma-3-270m, gemma-3-1b, and the text tower of the larger ones
// saved as Gemma3ForCausalLM): embeddings scaled by sqrt(hidden) (rounded to the embedding's
// fp32), RMSNorms that scale by (1 + w) both before and after attention and the MLP (the post
// norms come before each residual add), an RMSNorm over each query and key head, a GeGLU MLP
// (tanh GELU), scores scaled by query_pre_attn_scalar^-1/2, its own head size (256), a tied head,
// pad token 0 whose embedding row gets no gradient, and local layers (sliding window, their own
// RoPE base rope_local_base_freq, no scaling) among global ones (every sliding_window_pattern-th:
// rope_theta with rope_scaling, linear or none). Final and attention logit soft-capping (Gemma 2)
// are refused by name, as are the image-text checkpoints (model_type gemma3).
//
// Hugging Face: Gemma3ForCausalLM, model_type gemma3_text (modeling_gemma3.py).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "model/decoder_family.h"
#include "model/family.h"
#include "model/gguf_file.h"
#include "model/hf_config.h"
#include "model/limits.h"

namespace cputrain::model {
namespace {

using nlohmann::json;

std::vector<TensorInfo> Gemma3Tensors(const Shape& s) {
  return DecoderTensors(s, {.qkv_bias = s.attn_bias,
                            .out_bias = s.attn_bias,
                            .qk_norm = true,
                            .sandwich = true,
                            .norm_init = Init::kZeros});
}

// The windowed layers where config.json has no layer_types: all but every n-th, n =
// sliding_window_pattern (6 if absent), as transformers 4.55's Gemma3TextConfig builds its
// layer_types: from kwargs' "sliding_window_pattern" only. It also saves the pattern as
// "_sliding_window_pattern", but reading a config back it ignores that key (its
// __init__ overwrites it with the other one, or 6): here a value that disagrees with the pattern
// used is refused, not ignored. A value transformers fails on (0, null, a string) or reads oddly
// (a negative n, 2.5, true: Python's % on them) is refused by name too.
std::vector<bool> PatternRule(const json& cfg, const std::string& path, int L) {
  if (cfg.contains("layer_types") && !cfg["layer_types"].is_null()) {
    return std::vector<bool>(L);  // layer_types decides (hf::WindowLayers)
  }
  const json used =
      cfg.contains("sliding_window_pattern") ? cfg["sliding_window_pattern"] : json(6);
  const bool whole =
      used.is_number_integer() ||
      (used.is_number_float() && std::trunc(used.get<double>()) == used.get<double>());
  if (!whole || used.get<double>() < 1) {
    hf::BadConfig(path,
                  fmt::format("sliding_window_pattern is {}, not a positive whole number (every "
                              "n-th layer global)",
                              used.dump()),
                  "write the pattern (Gemma 3's is 6), or layer_types");
  }
  if (cfg.contains("_sliding_window_pattern") && cfg["_sliding_window_pattern"] != used) {
    hf::BadConfig(path,
                  fmt::format("_sliding_window_pattern is {}, but without layer_types transformers "
                              "ignores it and reads sliding_window_pattern ({})",
                              cfg["_sliding_window_pattern"].dump(),
                              cfg.contains("sliding_window_pattern") ? used.dump() : "absent: 6"),
                  "write the pattern meant as sliding_window_pattern, or add layer_types");
  }
  // A pattern longer than the model windows every layer.
  const auto n = static_cast<long long>(std::min(used.get<double>(), kMaxLayers + 1.0));
  std::vector<bool> rule(L);
  for (int l = 0; l < L; ++l) rule[l] = (l + 1) % n != 0;
  return rule;
}

Shape Gemma3FromHf(const json& cfg, const std::string& path) {
  const char* family = "Gemma 3";
  hf::FixedKey(cfg, "hidden_activation", {"gelu_pytorch_tanh"}, path, family);
  hf::FixedKey(cfg, "final_logit_softcapping", {nullptr}, path, family);  // Gemma 2's
  hf::FixedKey(cfg, "attn_logit_softcapping", {nullptr}, path, family);
  hf::FixedKey(cfg, "attention_dropout", {0}, path, family);
  hf::FixedKey(cfg, "use_bidirectional_attention", {false}, path, family);
  Shape s = hf::DecoderKeys(cfg, path, Arch::kGemma3, /*tied=*/true, /*default_head_dim=*/256);
  s.rope_theta = static_cast<float>(hf::FloatKey(cfg, "rope_theta", path, 1000000.0));
  if (!cfg.contains("pad_token_id")) s.pad_token = 0;  // Gemma3TextConfig's
  s.attn_bias = hf::BoolKey(cfg, "attention_bias", path, false);
  s.attn_scalar = static_cast<float>(hf::FloatKey(cfg, "query_pre_attn_scalar", path, 256.0));
  s.rope_local_theta = static_cast<float>(hf::FloatKey(cfg, "rope_local_base_freq", path, 10000.0));
  hf::RopeScalingKey(cfg, path, family, {RopeScaling::kLinear}, &s);
  // (Gemma3TextConfig builds layer_types, failing on a bad pattern, whatever sliding_window is.)
  const std::vector<bool> rule = PatternRule(cfg, path, s.L);
  // The sliding window Gemma3TextConfig defaults to (4096); none if null.
  if (!cfg.contains("sliding_window") || !cfg["sliding_window"].is_null()) {
    hf::WindowLayers(cfg, path, hf::IntKey(cfg, "sliding_window", path, kMaxSeqLen, 4096), rule,
                     &s);
  }
  return s;
}

json Gemma3ToHf(const Shape& s) {
  json cfg = hf::DecoderKeysJson(s);
  cfg["architectures"] = {"Gemma3ForCausalLM"};
  cfg["attention_bias"] = s.attn_bias;
  cfg["attention_dropout"] = 0.0;
  cfg["attn_logit_softcapping"] = nullptr;
  cfg["final_logit_softcapping"] = nullptr;
  cfg["hidden_activation"] = "gelu_pytorch_tanh";
  cfg["layer_types"] = hf::LayerTypesJson(s);
  cfg["model_type"] = "gemma3_text";
  cfg["pad_token_id"] = s.pad_token >= 0 ? json(s.pad_token) : json(nullptr);
  cfg["query_pre_attn_scalar"] = hf::Decimal(s.attn_scalar);
  cfg["rope_local_base_freq"] = hf::Decimal(s.rope_local_theta);
  // Gemma3TextModel builds a sliding-window mask whatever the layers are: a value it can read
  // even when no layer is windowed (then unused).
  cfg["sliding_window"] = s.window > 0 ? s.window : 4096;
  return cfg;
}

// model.*: the keys as given, and Gemma 3's own values the config has no key for:
// query_pre_attn_scalar = the head size, rope_local_base_freq 10000 (no layer is windowed, so
// it is unused until a Hugging Face directory sets the windows), pad token 0.
Shape Gemma3FromConfig(const Shape& keys) {
  Shape s = DecoderFromConfig(keys);
  s.attn_scalar = static_cast<float>(s.head_size());
  s.rope_local_theta = 10000.f;
  s.pad_token = s.V > 0 ? 0 : -1;
  return s;
}

std::string Gemma3Problem(const Shape& s) {
  return s.attn_scalar > 0 && s.rope_local_theta > 0
             ? ""
             : "Gemma 3 has a query_pre_attn_scalar and a local RoPE base";
}

// Llama's names (hf_config.h), except that Gemma's post_attention_layernorm is the norm after
// attention (kLnPostAttnw), its norm before the MLP pre_feedforward_layernorm, and it has a
// post_feedforward_layernorm.
std::vector<HfTensor> Gemma3HfTensors() {
  std::vector<HfTensor> t = hf::LlamaHfTensors();
  for (HfTensor& h : t)
    if (h.t == kLn2w) h.t = kLnPostAttnw;
  t.push_back({kLn2w, "model.layers.{}.pre_feedforward_layernorm.weight"});
  t.push_back({kLnPostMlpw, "model.layers.{}.post_feedforward_layernorm.weight"});
  return t;
}

// gemma-3-270m (config.json of google/gemma-3-270m): 18 layers of 640, 4 heads of 256 over 1 KV
// head, MLP 2048, vocabulary 262,144, tied, query_pre_attn_scalar 256, rope_theta 1e6, local
// layers (5 of every 6) with a window of 512 and RoPE base 1e4, rms_norm_eps 1e-6; 268,098,176
// parameters (model card: 270M, 170M of them the embedding).
Preset Gemma3_270m() {
  Shape s{128, 262144, Shape::PadVocab(262144), 18, 4, 640};
  s.arch = Arch::kGemma3;
  s.NKV = 1;
  s.F = 2048;
  s.HD = 256;
  s.norm_eps = 1e-6f;
  s.rope_theta = 1000000.f;
  s.rope_local_theta = 10000.f;
  s.attn_scalar = 256.f;
  s.window = 512;
  s.global_every = 6;
  s.tied = true;
  s.attn_bias = s.mlp_bias = false;
  s.pad_token = 0;
  return {"gemma3-270m", s, 4, 128};
}

// llama.cpp's "gemma3": Llama's names (halves rotated as Hugging Face's) and the norms after
// attention and the MLP; every norm stored as 1 + w.
std::vector<GgufTensor> Gemma3GgufTensors() {
  std::vector<GgufTensor> t = LlamaGgufTensors(/*rope_permute=*/false);
  t.push_back({kLnPostAttnw, "blk.{}.post_attention_norm.weight"});
  t.push_back({kLnPostMlpw, "blk.{}.post_ffw_norm.weight"});
  for (GgufTensor& g : t) {
    for (Tensor norm : {kLn1w, kLn2w, kQNormw, kKNormw, kLnPostAttnw, kLnPostMlpw, kLnfw})
      g.plus_one = g.plus_one || g.t == norm;
  }
  return t;
}

// convert_hf_to_gguf.py's Gemma3Model: the windowed layers' RoPE base, and the window when one
// is set (without it llama.cpp windows no layer).
void Gemma3GgufMetadata(const Shape& s, GgufWriter& w) {
  DecoderGgufKeys("gemma3", s, w);
  w.Float32("gemma3.rope.freq_base_swa", s.rope_local_theta);
  if (s.window > 0) w.Uint32("gemma3.attention.sliding_window", s.window);
}

// What llama.cpp's Gemma 3 fixes (src/models/gemma3.cpp in llama.cpp): scores scaled by
// head_dim^-1/2 (hidden / heads for its 62-layer 27B), not by query_pre_attn_scalar; five
// windowed layers of every six; no attention biases.
std::string Gemma3GgufProblem(const Shape& s) {
  if (s.attn_bias) return "attention_bias (it has no bias on the attention output)";
  const int scalar = s.L == 62 ? s.C / s.NH : s.head_size();
  if (s.attn_scalar != static_cast<float>(scalar)) {
    return fmt::format(
        "query_pre_attn_scalar {} (it scales a {}-layer Gemma 3's scores by {}^-1/2)",
        s.attn_scalar, s.L, scalar);
  }
  for (int l = 0; s.window > 0 && l < s.L; ++l) {
    if (s.windowed(l) != (l % 6 < 5)) {
      return fmt::format(
          "layer {} is {}; it windows layers 0-4 of every six (Gemma 3's "
          "sliding_window_pattern 6)",
          l, s.windowed(l) ? "windowed" : "global");
    }
  }
  return "";
}

const GgufNames kGemma3Gguf = {
    .arch = "gemma3",
    .tensors = Gemma3GgufTensors(),
    .metadata = Gemma3GgufMetadata,
    .problem = Gemma3GgufProblem,
    .windows = true,
};

}  // namespace

extern const Family kGemma3Family = {
    .name = "gemma3",
    .arch = Arch::kGemma3,
    .kind = {.rms_norm = true,
             .rope = true,
             .geglu = true,
             .qk_norm = true,
             .sandwich_norm = true,
             .norm_plus_one = true,
             .embed_scale = true},
    .tensors = Gemma3Tensors,
    .problem = Gemma3Problem,
    .from_config = Gemma3FromConfig,
    .hf_model_type = "gemma3_text",
    .hf_architecture = "Gemma3ForCausalLM",
    .from_hf_config = Gemma3FromHf,
    .to_hf_config = Gemma3ToHf,
    .hf_tensors = Gemma3HfTensors(),
    .hf_optional_prefix = "",
    .hf_ignored_suffixes = {".rotary_emb.inv_freq", ".rotary_emb_local.inv_freq", ".embed_scale"},
    .hf_refused_types = {{"gemma3", "an image-text Gemma 3 (Gemma3ForConditionalGeneration)"}},
    .lora_default_targets = {"q_proj", "v_proj"},  // PEFT's for gemma3_text
    .presets = {Gemma3_270m()},
    .gguf = &kGemma3Gguf,
};

}  // namespace cputrain::model
