// Llama (Llama 2/3, TinyLlama, SmolLM2, and Mistral-shaped models without a sliding window):
// RMSNorm, rotary embeddings (Hugging Face's rotate_half convention; llama3 rope_scaling),
// grouped-query attention, a SwiGLU MLP, no biases unless attention_bias / mlp_bias, the LM head
// tied to the embedding or not.
//
// Hugging Face: LlamaForCausalLM. q_proj, k_proj and v_proj are the row parts of our fused qkvw
// ([NH | NKV | NKV] heads), gate_proj and up_proj those of fcw ([F | F]); every weight is
// (out, in) as ours, so nothing is transposed or permuted (the rotary convention is HF's own).
#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "model/family.h"
#include "model/gguf_file.h"
#include "model/hf_config.h"
#include "model/limits.h"

namespace cputrain::model {
namespace {

std::vector<TensorInfo> LlamaTensors(const Shape& s) {
  auto dim = [](int d) { return static_cast<std::size_t>(std::max(d, 0)); };
  const std::size_t C = dim(s.C), Vp = dim(s.Vp), V = dim(s.V), F = dim(s.ffn());
  const std::size_t Q = dim(s.NH) > 0 && C % dim(s.NH) == 0 ? dim(s.qkv_width()) : 3 * C;
  constexpr bool L = true, D = true;  // per layer, weight decay
  using I = Init;
  std::vector<TensorInfo> t = {MakeTensor(kWte, "embed", !L, D, I::kNormal, {Vp, C}, V)};
  t.push_back(MakeTensor(kLn1w, "attn_norm", L, !D, I::kOnes, {C}));
  t.push_back(MakeTensor(kQkvw, "qkvw", L, D, I::kNormal, {Q, C}));
  if (s.attn_bias) t.push_back(MakeTensor(kQkvb, "qkvb", L, !D, I::kZeros, {Q}));
  t.push_back(MakeTensor(kAttprojw, "attn_out", L, D, I::kNormal, {C, C}));
  if (s.attn_bias) t.push_back(MakeTensor(kAttprojb, "attn_out_b", L, !D, I::kZeros, {C}));
  t.push_back(MakeTensor(kLn2w, "mlp_norm", L, !D, I::kOnes, {C}));
  t.push_back(MakeTensor(kFcw, "gate_up", L, D, I::kNormal, {2 * F, C}));
  if (s.mlp_bias) t.push_back(MakeTensor(kFcb, "gate_up_b", L, !D, I::kZeros, {2 * F}));
  t.push_back(MakeTensor(kFcprojw, "down", L, D, I::kNormal, {C, F}));
  if (s.mlp_bias) t.push_back(MakeTensor(kFcprojb, "down_b", L, !D, I::kZeros, {C}));
  t.push_back(MakeTensor(kLnfw, "norm", !L, !D, I::kOnes, {C}));
  if (!s.tied) t.push_back(MakeTensor(kLmHead, "lm_head", !L, D, I::kNormal, {Vp, C}, V));
  return t;
}

// model.*: the keys as given; no biases (a random init's Llama has none, as transformers'
// default attention_bias and mlp_bias false).
Shape LlamaFromConfig(const Shape& keys) {
  Shape s = keys;
  s.attn_bias = s.mlp_bias = false;
  s.types = 0;
  s.hidden_dropout = s.attn_dropout = s.head_dropout = 0;
  return s;
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

// SmolLM2-135M with a sequence classifier (LlamaForSequenceClassification: the last real token
// through score, 2 labels; pad_token_id 0): a small decoder classifier or reward model, B=8 T=128.
Preset SmolLm2Classifier() {
  Preset p = LlamaPreset("smollm2-135m-cls", 30, 576, 9, 3, 1536, 49152, 100000.f, 8, 128);
  p.shape.head = Head::kClassify;
  p.shape.labels = 2;
  p.shape.pad_token = 0;
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
  if (s.C % s.NH == 0) {
    hf::FixedKey(cfg, "head_dim", {s.C / s.NH}, path, family);
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
      // transformers refuses a llama3 rope_scaling without these ("Missing required keys"):
      // no made-up defaults here either.
      for (const char* key :
           {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}) {
        if (!r.contains(key) || r[key].is_null()) {
          hf::BadConfig(path, fmt::format("rope_scaling of type llama3 has no '{}'", key),
                        "add it, as transformers requires (Llama 3.1's: factor 8, "
                        "low_freq_factor 1, high_freq_factor 4, "
                        "original_max_position_embeddings 8192)");
        }
      }
      RopeScaling& rs = s.rope_scaling;
      rs.kind = RopeScaling::kLlama3;
      rs.factor = static_cast<float>(hf::FloatKey(r, "factor", where, 0));  // (all present)
      rs.low_freq_factor = static_cast<float>(hf::FloatKey(r, "low_freq_factor", where, 0));
      rs.high_freq_factor = static_cast<float>(hf::FloatKey(r, "high_freq_factor", where, 0));
      rs.original_max_position =
          hf::IntKey(r, "original_max_position_embeddings", where, kMaxSeqLen);
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
          {"pretraining_tp", 1},
          {"rms_norm_eps", Decimal(s.norm_eps)},
          {"rope_scaling", rope},
          {"rope_theta", Decimal(s.rope_theta)},
          {"tie_word_embeddings", s.tied},
          {"torch_dtype", "float32"},
          {"use_cache", true},
          {"vocab_size", s.V}};
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
  w.Uint32("llama.attention.head_count_kv", s.kv_heads());
  w.Float32("llama.rope.freq_base", s.rope_theta);
  w.Float32("llama.attention.layer_norm_rms_epsilon", s.norm_eps);
  w.Uint32("llama.attention.key_length", s.head_size());
  w.Uint32("llama.attention.value_length", s.head_size());
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

// llama.cpp's "llama" architecture: q, k, v, gate and up apart; q and k rows in llama.cpp's
// rotary order (GgufTensor::rope_permute); a tied head is token_embd (no output.weight).
const GgufNames kLlamaGguf = {
    .arch = "llama",
    .tensors = {{kWte, "token_embd.weight"},
                {kLn1w, "blk.{}.attn_norm.weight"},
                {kQkvw, "blk.{}.attn_q.weight", HfTensor::kQ, true},
                {kQkvw, "blk.{}.attn_k.weight", HfTensor::kK, true},
                {kQkvw, "blk.{}.attn_v.weight", HfTensor::kV},
                {kQkvb, "blk.{}.attn_q.bias", HfTensor::kQ, true},
                {kQkvb, "blk.{}.attn_k.bias", HfTensor::kK, true},
                {kQkvb, "blk.{}.attn_v.bias", HfTensor::kV},
                {kAttprojw, "blk.{}.attn_output.weight"},
                {kAttprojb, "blk.{}.attn_output.bias"},
                {kLn2w, "blk.{}.ffn_norm.weight"},
                {kFcw, "blk.{}.ffn_gate.weight", HfTensor::kGate},
                {kFcw, "blk.{}.ffn_up.weight", HfTensor::kUp},
                {kFcb, "blk.{}.ffn_gate.bias", HfTensor::kGate},
                {kFcb, "blk.{}.ffn_up.bias", HfTensor::kUp},
                {kFcprojw, "blk.{}.ffn_down.weight"},
                {kFcprojb, "blk.{}.ffn_down.bias"},
                {kLnfw, "output_norm.weight"},
                {kLmHead, "output.weight"}},
    .metadata = LlamaGgufMetadata,
};

}  // namespace

extern const Family kLlamaFamily = {
    .name = "llama",
    .arch = Arch::kLlama,
    .kind = {.rms_norm = true, .swiglu = true, .rope = true},
    .tensors = LlamaTensors,
    .from_config = LlamaFromConfig,
    .hf_model_type = "llama",
    .hf_architecture = "LlamaForCausalLM",
    .from_hf_config = LlamaFromHf,
    .to_hf_config = LlamaToHf,
    .hf_tensors = {{kWte, "model.embed_tokens.weight"},
                   {kLn1w, "model.layers.{}.input_layernorm.weight"},
                   {kQkvw, "model.layers.{}.self_attn.q_proj.weight", HfTensor::kQ},
                   {kQkvw, "model.layers.{}.self_attn.k_proj.weight", HfTensor::kK},
                   {kQkvw, "model.layers.{}.self_attn.v_proj.weight", HfTensor::kV},
                   {kQkvb, "model.layers.{}.self_attn.q_proj.bias", HfTensor::kQ},
                   {kQkvb, "model.layers.{}.self_attn.k_proj.bias", HfTensor::kK},
                   {kQkvb, "model.layers.{}.self_attn.v_proj.bias", HfTensor::kV},
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
                   {kLmHead, "lm_head.weight"}},
    .hf_optional_prefix = "",
    .hf_ignored_suffixes = {".rotary_emb.inv_freq"},
    .hf_classify_architecture = "LlamaForSequenceClassification",
    .lora_default_targets = {"q_proj", "v_proj"},
    .presets = {LlamaPreset("smollm2-135m", 30, 576, 9, 3, 1536, 49152, 100000.f, 4, 128),
                Llama1b(), SmolLm2Classifier()},
    .gguf = &kLlamaGguf,
};

}  // namespace cputrain::model
