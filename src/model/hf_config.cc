// What several families' config.json readers and writers share (hf_config.h); the single-key
// readers (IntKey, FixedKey, ...) are in hf.cc.
#include "model/hf_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "model/limits.h"

namespace cputrain::model::hf {

using nlohmann::json;

double Decimal(float x) { return std::stod(fmt::format("{}", x)); }

Shape DecoderKeys(const json& cfg, const std::string& path, Arch arch, bool tied,
                  int default_head_dim) {
  // transformers' RoPE takes partial_rotary_factor from any config (rope_utils: the rotated
  // dimension is head_dim times it), but only Phi-3's attention rotates part of a head: the other
  // families' fail on it ("The size of tensor a (16) must match the size of tensor b (8)"). This
  // engine rotates whole heads, so a factor other than 1 is refused for every family.
  if (cfg.contains("partial_rotary_factor") && !cfg["partial_rotary_factor"].is_null() &&
      cfg["partial_rotary_factor"] != 1) {
    BadConfig(path,
              fmt::format("partial_rotary_factor is {}; cputrain-numa's {} rotates whole heads "
                          "(partial_rotary_factor 1)",
                          cfg["partial_rotary_factor"].dump(), FamilyOf(arch).name),
              "this model is not one this engine can run: rotary embeddings over part of a head "
              "are not implemented (docs/fine-tuning.md)");
  }
  Shape s;
  s.arch = arch;
  s.C = IntKey(cfg, "hidden_size", path, kMaxChannels);
  s.L = IntKey(cfg, "num_hidden_layers", path, kMaxLayers);
  s.NH = IntKey(cfg, "num_attention_heads", path, kMaxChannels);
  s.NKV = IntKey(cfg, "num_key_value_heads", path, kMaxChannels, s.NH);
  s.F = IntKey(cfg, "intermediate_size", path, 4 * kMaxChannels);
  s.V = IntKey(cfg, "vocab_size", path, kMaxVocab);
  s.maxT = IntKey(cfg, "max_position_embeddings", path, kMaxSeqLen);
  s.Vp = Shape::PadVocab(s.V);
  int head_dim = default_head_dim;
  if (cfg.contains("head_dim") && !cfg["head_dim"].is_null()) {
    head_dim = IntKey(cfg, "head_dim", path, kMaxChannels);
  }
  // head_dim equal to hidden / heads is the default's: kept as 0, so the shape is the same model.
  s.HD = head_dim > 0 && !(s.C % s.NH == 0 && head_dim == s.C / s.NH) ? head_dim : 0;
  s.norm_eps = static_cast<float>(FloatKey(cfg, "rms_norm_eps", path, 1e-6));
  s.rope_theta = static_cast<float>(FloatKey(cfg, "rope_theta", path, 10000.0));
  s.tied = BoolKey(cfg, "tie_word_embeddings", path, tied);
  s.attn_bias = s.mlp_bias = false;
  if (cfg.contains("pad_token_id") && !cfg["pad_token_id"].is_null()) {
    const json& p = cfg["pad_token_id"];
    if (!p.is_number_integer() || p.get<long long>() < 0 || p.get<long long>() >= s.V) {
      BadConfig(
          path,
          fmt::format("pad_token_id is {}, not a token id below vocab_size {}", p.dump(), s.V),
          "fix config.json");
    }
    s.pad_token = static_cast<int>(p.get<long long>());
  }
  return s;
}

json DecoderKeysJson(const Shape& s) {
  json cfg = {{"head_dim", s.head_size()},
              {"hidden_size", s.C},
              {"initializer_range", 0.02},
              {"intermediate_size", s.ffn()},
              {"max_position_embeddings", s.maxT},
              {"num_attention_heads", s.NH},
              {"num_hidden_layers", s.L},
              {"num_key_value_heads", s.kv_heads()},
              {"rms_norm_eps", Decimal(s.norm_eps)},
              {"rope_scaling", RopeScalingJson(s.rope_scaling)},
              {"rope_theta", Decimal(s.rope_theta)},
              {"tie_word_embeddings", s.tied},
              {"torch_dtype", "float32"},
              {"use_cache", true},
              {"vocab_size", s.V}};
  if (s.pad_token >= 0) cfg["pad_token_id"] = s.pad_token;
  return cfg;
}

void RopeScalingKey(const json& cfg, const std::string& path, const std::string& family,
                    const std::vector<RopeScaling::Kind>& ok, Shape* s) {
  if (!cfg.contains("rope_scaling") || cfg["rope_scaling"].is_null()) return;
  const json& r = cfg["rope_scaling"];
  const std::string where = path + " (rope_scaling)";
  if (!r.is_object()) BadConfig(path, "rope_scaling is not an object", "fix config.json");
  const json type_key = r.contains("rope_type") ? r["rope_type"] : r.value("type", json("default"));
  const std::string type = type_key.is_string() ? type_key.get<std::string>() : type_key.dump();
  if (type == "default") return;
  RopeScaling::Kind kind = RopeScaling::kNone;
  if (type == "llama3") kind = RopeScaling::kLlama3;
  if (type == "linear") kind = RopeScaling::kLinear;
  std::string runs;
  for (RopeScaling::Kind k : ok) runs += k == RopeScaling::kLlama3 ? "llama3, " : "linear, ";
  if (kind == RopeScaling::kNone || std::find(ok.begin(), ok.end(), kind) == ok.end()) {
    BadConfig(path, fmt::format("rope_scaling type '{}' is not supported for {}", type, family),
              fmt::format("cputrain-numa's {} runs rope_scaling of type {}or none", family, runs));
  }
  // transformers refuses a rope_scaling without its keys ("Missing required keys"): no made-up
  // defaults here either.
  std::vector<const char*> keys = {"factor"};
  if (kind == RopeScaling::kLlama3) {
    keys = {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"};
  }
  for (const char* key : keys) {
    if (r.contains(key) && !r[key].is_null()) continue;
    BadConfig(path, fmt::format("rope_scaling of type {} has no '{}'", type, key),
              kind == RopeScaling::kLlama3
                  ? "add it, as transformers requires (Llama 3.1's: factor 8, low_freq_factor 1, "
                    "high_freq_factor 4, original_max_position_embeddings 8192)"
                  : "add it, as transformers requires");
  }
  RopeScaling& rs = s->rope_scaling;
  rs.kind = kind;
  rs.factor = static_cast<float>(FloatKey(r, "factor", where, 0));  // (all present)
  if (kind == RopeScaling::kLlama3) {
    rs.low_freq_factor = static_cast<float>(FloatKey(r, "low_freq_factor", where, 0));
    rs.high_freq_factor = static_cast<float>(FloatKey(r, "high_freq_factor", where, 0));
    rs.original_max_position = IntKey(r, "original_max_position_embeddings", where, kMaxSeqLen);
  }
}

json RopeScalingJson(const RopeScaling& r) {
  switch (r.kind) {
    case RopeScaling::kNone:
      return nullptr;
    case RopeScaling::kLinear:
      return {{"factor", Decimal(r.factor)}, {"rope_type", "linear"}};
    case RopeScaling::kLlama3:
      return {{"factor", Decimal(r.factor)},
              {"high_freq_factor", Decimal(r.high_freq_factor)},
              {"low_freq_factor", Decimal(r.low_freq_factor)},
              {"original_max_position_embeddings", r.original_max_position},
              {"rope_type", "llama3"}};
  }
  return nullptr;
}

void WindowLayers(const json& cfg, const std::string& path, int window,
                  const std::vector<bool>& sliding, Shape* s) {
  std::vector<bool> layers = sliding;
  if (cfg.contains("layer_types") && !cfg["layer_types"].is_null()) {
    const json& t = cfg["layer_types"];
    if (!t.is_array() || t.size() != static_cast<std::size_t>(s->L)) {
      BadConfig(path,
                fmt::format("layer_types is not a list of num_hidden_layers = {} names", s->L),
                "fix config.json");
    }
    for (std::size_t l = 0; l < t.size(); ++l) {
      if (t[l] != "sliding_attention" && t[l] != "full_attention") {
        BadConfig(path,
                  fmt::format("layer_types[{}] is {}: cputrain-numa runs sliding_attention and "
                              "full_attention layers",
                              l, t[l].dump()),
                  "this model is not one this engine can run");
      }
      layers[l] = t[l] == "sliding_attention";
    }
  }
  const auto first = std::find(layers.begin(), layers.end(), true);
  if (window <= 0 || first == layers.end()) return;  // no layer has a window
  s->window = window;
  s->window_from = static_cast<int>(first - layers.begin());
  // The global layers after the first windowed one, if any, every global_every-th.
  const auto next_full = std::find(first, layers.end(), false);
  s->global_every =
      next_full == layers.end() ? 0 : static_cast<int>(next_full - layers.begin()) + 1;
  for (int l = 0; l < s->L; ++l) {
    if (s->windowed(l) == layers[l]) continue;
    BadConfig(path,
              fmt::format("its windowed layers ({}) are not a pattern cputrain-numa runs: every "
                          "layer from one on, or all but every n-th",
                          LayerTypesJson(*s).dump()),
              "docs/fine-tuning.md says which sliding-window layouts run");
  }
}

json LayerTypesJson(const Shape& s) {
  json t = json::array();
  for (int l = 0; l < s.L; ++l) t.push_back(s.windowed(l) ? "sliding_attention" : "full_attention");
  return t;
}

void QwenWindows(const json& cfg, const std::string& path, Shape* s) {
  if (!BoolKey(cfg, "use_sliding_window", path, false)) return;
  const int window = IntKey(cfg, "sliding_window", path, kMaxSeqLen, 4096);
  int from = 28;
  if (cfg.contains("max_window_layers") && !cfg["max_window_layers"].is_null()) {
    const json& m = cfg["max_window_layers"];
    from = m.is_number_integer() && m.get<long long>() == 0
               ? 0
               : IntKey(cfg, "max_window_layers", path, kMaxLayers);
  }
  std::vector<bool> rule(s->L);
  for (int l = 0; l < s->L; ++l) rule[l] = l >= from;
  WindowLayers(cfg, path, window, rule, s);
}

void QwenWindowsJson(const Shape& s, json* cfg) {
  (*cfg)["layer_types"] = LayerTypesJson(s);
  (*cfg)["max_window_layers"] = s.window > 0 ? s.window_from : s.L;
  (*cfg)["sliding_window"] = s.window > 0 ? json(s.window) : json(nullptr);
  (*cfg)["use_sliding_window"] = s.window > 0;
}

std::vector<HfTensor> LlamaHfTensors() {
  return {{kWte, "model.embed_tokens.weight"},
          {kLn1w, "model.layers.{}.input_layernorm.weight"},
          {kQkvw, "model.layers.{}.self_attn.q_proj.weight", HfTensor::kQ},
          {kQkvw, "model.layers.{}.self_attn.k_proj.weight", HfTensor::kK},
          {kQkvw, "model.layers.{}.self_attn.v_proj.weight", HfTensor::kV},
          {kQkvb, "model.layers.{}.self_attn.q_proj.bias", HfTensor::kQ},
          {kQkvb, "model.layers.{}.self_attn.k_proj.bias", HfTensor::kK},
          {kQkvb, "model.layers.{}.self_attn.v_proj.bias", HfTensor::kV},
          {kQNormw, "model.layers.{}.self_attn.q_norm.weight"},
          {kKNormw, "model.layers.{}.self_attn.k_norm.weight"},
          {kAttprojw, "model.layers.{}.self_attn.o_proj.weight"},
          {kAttprojb, "model.layers.{}.self_attn.o_proj.bias"},
          {kLn2w, "model.layers.{}.post_attention_layernorm.weight"},
          {kFcw, "model.layers.{}.mlp.gate_proj.weight", HfTensor::kGate},
          {kFcw, "model.layers.{}.mlp.up_proj.weight", HfTensor::kUp},
          {kFcb, "model.layers.{}.mlp.gate_proj.bias", HfTensor::kGate},
          {kFcb, "model.layers.{}.mlp.up_proj.bias", HfTensor::kUp},
          {kFcprojw, "model.layers.{}.mlp.down_proj.weight"},
          {kFcprojb, "model.layers.{}.mlp.down_proj.bias"},
          {kLnfw, "model.norm.weight"},
          {kLmHead, "lm_head.weight"}};
}

}  // namespace cputrain::model::hf
