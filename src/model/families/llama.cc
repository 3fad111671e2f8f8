// Llama (Llama 2/3, TinyLlama, SmolLM2, and Mistral-shaped models without a sliding window):
// RMSNorm, rotary embeddings (Hugging Face's rotate_half convention; llama3 rope_scaling),
// grouped-query attention, a SwiGLU MLP, no biases unless attention_bias / mlp_bias, the LM head
// tied to the embedding or not.
//
// Hugging Face: LlamaForCausalLM. q_proj, k_proj and v_proj are the row parts of our fused qkvw
// ([NH | NKV | NKV] heads), gate_proj and up_proj those of fcw ([F | F]); every weight is
// (out, in) as ours, so nothing is transposed or permuted (the rotary convention is HF's own).
// The names are the lineage's (hf_config.h, LlamaHfTensors), which Mistral and Qwen share.
#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "model/decoder_family.h"
#include "model/family.h"
#include "model/hf_config.h"
#include "model/limits.h"

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

// Llama 3.2 1B: tied, theta 5e5, llama3 rope scaling 32/1/4/8192.
Preset Llama1b() {
  Preset p = LlamaPreset("llama-1b", 16, 2048, 32, 8, 8192, 128256, 500000.f, 1, 128);
  RopeScaling& r = p.shape.rope_scaling;
  r.kind = RopeScaling::kLlama3;
  r.factor = 32;
  r.low_freq_factor = 1;
  r.high_freq_factor = 4;
  r.original_max_position = 8192;
  return p;
}

// A float as the shortest decimal that reads back as it (1e-05, not 9.999999747378752e-06).
double Decimal(float x) { return std::stod(fmt::format("{}", x)); }

Shape LlamaFromHf(const nlohmann::json& cfg, const std::string& path) {
  const char* family = "Llama";
  hf::FixedKey(cfg, "hidden_act", {"silu"}, path, family);
  hf::FixedKey(cfg, "pretraining_tp", {1}, path, family);
  hf::FixedKey(cfg, "sliding_window", {nullptr}, path, family);
  Shape s;
  s.arch = Arch::kLlama;
  s.C = hf::IntKey(cfg, "hidden_size", path, kMaxChannels);
  s.L = hf::IntKey(cfg, "num_hidden_layers", path, kMaxLayers);
  s.NH = hf::IntKey(cfg, "num_attention_heads", path, kMaxChannels);
  s.NKV = hf::IntKey(cfg, "num_key_value_heads", path, kMaxChannels, s.NH);
  s.F = hf::IntKey(cfg, "intermediate_size", path, 4 * kMaxChannels);
  s.V = hf::IntKey(cfg, "vocab_size", path, kMaxVocab);
  s.maxT = hf::IntKey(cfg, "max_position_embeddings", path, kMaxSeqLen);
  s.Vp = Shape::PadVocab(s.V);
  // head_dim (LlamaConfig's; default hidden / heads): kept as 0 when it is the default.
  if (cfg.contains("head_dim") && !cfg["head_dim"].is_null()) {
    const int hd = hf::IntKey(cfg, "head_dim", path, kMaxChannels);
    s.HD = s.C % s.NH == 0 && hd == s.C / s.NH ? 0 : hd;
  }
  // pad_token_id: nn.Embedding's padding_idx, whose row learns nothing (null: none).
  if (cfg.contains("pad_token_id") && cfg["pad_token_id"].is_number_integer()) {
    const long long pad = cfg["pad_token_id"].get<long long>();
    if (pad < 0 || pad >= s.V) {
      hf::BadConfig(path,
                    fmt::format("pad_token_id is {}, not a token id below vocab_size {}", pad, s.V),
                    "fix config.json");
    }
    s.pad_token = static_cast<int>(pad);
  }
  s.norm_eps = static_cast<float>(hf::FloatKey(cfg, "rms_norm_eps", path, 1e-6));
  s.rope_theta = static_cast<float>(hf::FloatKey(cfg, "rope_theta", path, 10000.0));
  s.tied = hf::BoolKey(cfg, "tie_word_embeddings", path, false);
  s.attn_bias = hf::BoolKey(cfg, "attention_bias", path, false);
  s.mlp_bias = hf::BoolKey(cfg, "mlp_bias", path, false);
  if (cfg.contains("rope_scaling") && !cfg["rope_scaling"].is_null()) {
    const nlohmann::json& r = cfg["rope_scaling"];
    const std::string where = path + " (rope_scaling)";
    if (!r.is_object()) hf::BadConfig(path, "rope_scaling is not an object", "fix config.json");
    const std::string type = r.value("rope_type", r.value("type", std::string("default")));
    if (type != "default") {
      if (type != "llama3") {
        hf::BadConfig(path, fmt::format("rope_scaling type '{}' is not supported", type),
                      "cputrain-numa runs rope_scaling of type llama3 (or none)");
      }
      RopeScaling& rs = s.rope_scaling;
      rs.kind = RopeScaling::kLlama3;
      rs.factor = static_cast<float>(hf::FloatKey(r, "factor", where, 8.0));
      rs.low_freq_factor = static_cast<float>(hf::FloatKey(r, "low_freq_factor", where, 1.0));
      rs.high_freq_factor = static_cast<float>(hf::FloatKey(r, "high_freq_factor", where, 4.0));
      rs.original_max_position =
          hf::IntKey(r, "original_max_position_embeddings", where, kMaxSeqLen, 8192);
    }
  }
  return s;
}

nlohmann::json LlamaToHf(const Shape& s) {
  nlohmann::json rope = nullptr;
  if (s.rope_scaling.kind == RopeScaling::kLlama3) {
    const RopeScaling& r = s.rope_scaling;
    rope = {{"factor", Decimal(r.factor)},
            {"high_freq_factor", Decimal(r.high_freq_factor)},
            {"low_freq_factor", Decimal(r.low_freq_factor)},
            {"original_max_position_embeddings", r.original_max_position},
            {"rope_type", "llama3"}};
  }
  return {{"architectures", {"LlamaForCausalLM"}},
          {"attention_bias", s.attn_bias},
          {"attention_dropout", 0.0},
          {"head_dim", s.head_size()},
          {"hidden_act", "silu"},
          {"hidden_size", s.C},
          {"initializer_range", 0.02},
          {"intermediate_size", s.ffn()},
          {"max_position_embeddings", s.maxT},
          {"mlp_bias", s.mlp_bias},
          {"model_type", "llama"},
          {"num_attention_heads", s.NH},
          {"num_hidden_layers", s.L},
          {"num_key_value_heads", s.kv_heads()},
          {"pad_token_id", s.pad_token >= 0 ? nlohmann::json(s.pad_token) : nlohmann::json()},
          {"pretraining_tp", 1},
          {"rms_norm_eps", Decimal(s.norm_eps)},
          {"rope_scaling", rope},
          {"rope_theta", Decimal(s.rope_theta)},
          {"tie_word_embeddings", s.tied},
          {"torch_dtype", "float32"},
          {"use_cache", true},
          {"vocab_size", s.V}};
}

}  // namespace

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
    .lora_default_targets = {"q_proj", "v_proj"},
    .presets = {LlamaPreset("smollm2-135m", 30, 576, 9, 3, 1536, 49152, 100000.f, 4, 128),
                Llama1b()},
};

}  // namespace cputrain::model
