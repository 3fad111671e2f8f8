// GPT-2 (Radford et al. 2019; llm.c's layout): learned positions, LayerNorm, GELU (tanh), every
// linear layer with a bias, the LM head tied to the token embedding.
//
// Hugging Face: GPT2LMHeadModel. Its four Conv1D weights are stored (in, out) and transposed to
// our (out, in); wte holds the real V rows (ours Vp, the padding zero); lm_head.weight, if
// present, must equal wte (a file where it differs is refused, not silently untied); the
// causal-mask buffers h.l.attn.bias / attn.masked_bias are ignored; the `transformer.` prefix may
// be absent (GPT2Model saves, the hub's gpt2).
#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "model/family.h"
#include "model/gguf_file.h"
#include "model/hf_config.h"
#include "model/limits.h"

namespace cputrain::model {
namespace {

std::vector<TensorInfo> Gpt2Tensors(const Shape& s) {
  // A negative dimension becomes 0 here; Shape::Problem() refuses such shapes before use.
  const std::size_t C = static_cast<std::size_t>(std::max(s.C, 0));
  const std::size_t Vp = static_cast<std::size_t>(std::max(s.Vp, 0));
  const std::size_t V = static_cast<std::size_t>(std::max(s.V, 0));
  const std::size_t maxT = static_cast<std::size_t>(std::max(s.maxT, 0));
  constexpr bool L = true, D = true;  // per layer, weight decay
  using I = Init;
  // llm.c's checkpoint order. Weights are (out, in).
  return {MakeTensor(kWte, "wte", !L, D, I::kNormal, {Vp, C}, V),
          MakeTensor(kWpe, "wpe", !L, D, I::kNormal, {maxT, C}),
          MakeTensor(kLn1w, "ln1w", L, !D, I::kOnes, {C}),
          MakeTensor(kLn1b, "ln1b", L, !D, I::kZeros, {C}),
          MakeTensor(kQkvw, "qkvw", L, D, I::kNormal, {3 * C, C}),
          MakeTensor(kQkvb, "qkvb", L, !D, I::kZeros, {3 * C}),
          MakeTensor(kAttprojw, "attprojw", L, D, I::kResidualNormal, {C, C}),
          MakeTensor(kAttprojb, "attprojb", L, !D, I::kZeros, {C}),
          MakeTensor(kLn2w, "ln2w", L, !D, I::kOnes, {C}),
          MakeTensor(kLn2b, "ln2b", L, !D, I::kZeros, {C}),
          MakeTensor(kFcw, "fcw", L, D, I::kNormal, {4 * C, C}),
          MakeTensor(kFcb, "fcb", L, !D, I::kZeros, {4 * C}),
          MakeTensor(kFcprojw, "fcprojw", L, D, I::kResidualNormal, {C, 4 * C}),
          MakeTensor(kFcprojb, "fcprojb", L, !D, I::kZeros, {C}),
          MakeTensor(kLnfw, "lnfw", !L, !D, I::kOnes, {C}),
          MakeTensor(kLnfb, "lnfb", !L, !D, I::kZeros, {C})};
}

std::string Gpt2Problem(const Shape& s) {
  if (s.kv_heads() != s.NH || s.ffn() != 4 * s.C || !s.tied || s.HD != 0 || s.window != 0) {
    return "GPT-2 has NKV = NH, F = 4C and a tied head";
  }
  return "";
}

// model.*: GPT-2's shape is its six dimensions; the keys of other families must be left at what
// GPT-2 is (LayerNorm's eps is GPT-2's 1e-5 whatever norm_eps says).
Shape Gpt2FromConfig(const Shape& k) {
  if ((k.NKV != 0 && k.NKV != k.NH) || (k.F != 0 && k.F != 4 * k.C) || !k.tied ||
      k.rope_scaling.kind != RopeScaling::kNone || (k.HD != 0 && k.NH * k.HD != k.C)) {
    throw InputError(
        "model.arch gpt2 has kv_heads = heads, ffn_hidden = 4 * channels, head_dim = channels / "
        "heads and tied embeddings",
        "set model.arch: llama for grouped-query attention, another MLP width or an untied "
        "head");
  }
  return Shape{k.maxT, k.V, k.Vp, k.L, k.NH, k.C};
}

Shape Gpt2FromHf(const nlohmann::json& cfg, const std::string& path) {
  using nlohmann::json;
  const char* family = "GPT-2";
  hf::FixedKey(cfg, "activation_function", {"gelu_new", "gelu_pytorch_tanh"}, path, family);
  hf::FixedKey(cfg, "scale_attn_weights", {true}, path, family);
  hf::FixedKey(cfg, "scale_attn_by_inverse_layer_idx", {false}, path, family);
  hf::FixedKey(cfg, "add_cross_attention", {false}, path, family);
  hf::FixedKey(cfg, "tie_word_embeddings", {true}, path, family);
  Shape s;
  s.arch = Arch::kGpt2;
  s.C = hf::IntKey(cfg, "n_embd", path, kMaxChannels);
  s.L = hf::IntKey(cfg, "n_layer", path, kMaxLayers);
  s.NH = hf::IntKey(cfg, "n_head", path, kMaxChannels);
  s.V = hf::IntKey(cfg, "vocab_size", path, kMaxVocab);
  s.maxT = hf::IntKey(cfg, cfg.contains("n_positions") ? "n_positions" : "n_ctx", path, kMaxSeqLen);
  s.Vp = Shape::PadVocab(s.V);
  if (cfg.contains("n_inner") && !cfg["n_inner"].is_null() &&
      cfg["n_inner"] != json(std::int64_t{4} * s.C)) {
    hf::BadConfig(path,
                  "n_inner is " + cfg["n_inner"].dump() +
                      "; GPT-2's MLP is 4 * n_embd = " + std::to_string(4 * s.C),
                  "this model is not a GPT-2 this engine can run");
  }
  const double eps = hf::FloatKey(cfg, "layer_norm_epsilon", path, 1e-5);
  if (std::fabs(eps - 1e-5) > 1e-12) {
    hf::BadConfig(path,
                  "layer_norm_epsilon is " + cfg["layer_norm_epsilon"].dump() +
                      "; GPT-2's LayerNorm uses 1e-5",
                  "this model is not a GPT-2 this engine can run");
  }
  return s;
}

nlohmann::json Gpt2ToHf(const Shape& s) {
  nlohmann::json cfg = {{"activation_function", "gelu_new"},
                        {"architectures", {"GPT2LMHeadModel"}},
                        {"attn_pdrop", 0.1},
                        {"embd_pdrop", 0.1},
                        {"initializer_range", 0.02},
                        {"layer_norm_epsilon", 1e-05},
                        {"model_type", "gpt2"},
                        {"n_ctx", s.maxT},
                        {"n_embd", s.C},
                        {"n_head", s.NH},
                        {"n_inner", nullptr},
                        {"n_layer", s.L},
                        {"n_positions", s.maxT},
                        {"resid_pdrop", 0.1},
                        {"scale_attn_weights", true},
                        {"tie_word_embeddings", true},
                        {"torch_dtype", "float32"},
                        {"use_cache", true},
                        {"vocab_size", s.V}};
  if (s.V > 50256) {  // GPT-2's <|endoftext|>; a smaller vocabulary (bytes) has none
    cfg["bos_token_id"] = 50256;
    cfg["eos_token_id"] = 50256;
  }
  return cfg;
}

void Gpt2GgufMetadata(const Shape& s, GgufWriter& w) {
  w.Float32("gpt2.attention.layer_norm_epsilon", s.norm_eps);
}

// llama.cpp's "gpt2" architecture: every tensor as ours (fused qkv, (out, in) weights); the head
// is token_embd (llama.cpp duplicates it when output.weight is absent).
const GgufNames kGpt2Gguf = {
    .arch = "gpt2",
    .tensors = {{kWte, "token_embd.weight"},
                {kWpe, "position_embd.weight"},
                {kLn1w, "blk.{}.attn_norm.weight"},
                {kLn1b, "blk.{}.attn_norm.bias"},
                {kQkvw, "blk.{}.attn_qkv.weight"},
                {kQkvb, "blk.{}.attn_qkv.bias"},
                {kAttprojw, "blk.{}.attn_output.weight"},
                {kAttprojb, "blk.{}.attn_output.bias"},
                {kLn2w, "blk.{}.ffn_norm.weight"},
                {kLn2b, "blk.{}.ffn_norm.bias"},
                {kFcw, "blk.{}.ffn_up.weight"},
                {kFcb, "blk.{}.ffn_up.bias"},
                {kFcprojw, "blk.{}.ffn_down.weight"},
                {kFcprojb, "blk.{}.ffn_down.bias"},
                {kLnfw, "output_norm.weight"},
                {kLnfb, "output_norm.bias"}},
    .metadata = Gpt2GgufMetadata,
};

}  // namespace

extern const Family kGpt2Family = {
    .name = "gpt2",
    .arch = Arch::kGpt2,
    .kind = {.rms_norm = false, .swiglu = false, .rope = false, .embed_padding_idx = false},
    .tensors = Gpt2Tensors,
    .problem = Gpt2Problem,
    .from_config = Gpt2FromConfig,
    .hf_model_type = "gpt2",
    .hf_architecture = "GPT2LMHeadModel",
    .from_hf_config = Gpt2FromHf,
    .to_hf_config = Gpt2ToHf,
    .hf_tensors = {{kWte, "wte.weight"},
                   {kWpe, "wpe.weight"},
                   {kLn1w, "h.{}.ln_1.weight"},
                   {kLn1b, "h.{}.ln_1.bias"},
                   {kQkvw, "h.{}.attn.c_attn.weight", HfTensor::kAll, true},
                   {kQkvb, "h.{}.attn.c_attn.bias"},
                   {kAttprojw, "h.{}.attn.c_proj.weight", HfTensor::kAll, true},
                   {kAttprojb, "h.{}.attn.c_proj.bias"},
                   {kLn2w, "h.{}.ln_2.weight"},
                   {kLn2b, "h.{}.ln_2.bias"},
                   {kFcw, "h.{}.mlp.c_fc.weight", HfTensor::kAll, true},
                   {kFcb, "h.{}.mlp.c_fc.bias"},
                   {kFcprojw, "h.{}.mlp.c_proj.weight", HfTensor::kAll, true},
                   {kFcprojb, "h.{}.mlp.c_proj.bias"},
                   {kLnfw, "ln_f.weight"},
                   {kLnfb, "ln_f.bias"}},
    .hf_optional_prefix = "transformer.",
    .hf_ignored_suffixes = {".attn.bias", ".attn.masked_bias"},
    .hf_classify_architecture = "GPT2ForSequenceClassification",
    .hf_untied_hint =
        "cputrain-numa ties GPT-2's LM head to the token embedding as GPT-2 does; an "
        "untied head cannot be loaded",
    .lora_default_targets = {"c_attn"},
    .llmc = true,
    .vocab_tokenizer = "gpt2",
    // B is the global batch (sequences per step); maxT is T: the position table covers the run.
    .presets = {{"tiny", Shape{64, 256, 256, 2, 4, 128}, 4, 64},
                {"small", Shape{256, 50257, Shape::PadVocab(50257), 6, 6, 384}, 4, 256},
                {"gpt2-124M", Shape{128, 50257, Shape::PadVocab(50257), 12, 12, 768}, 4, 128}},
    .bench = {.speed_target = 1.0, .script_model = true},
    .gguf = &kGpt2Gguf,
};

}  // namespace cputrain::model
