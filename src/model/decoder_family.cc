#include "model/decoder_family.h"

#include <algorithm>

#include "model/gguf_file.h"

namespace cputrain::model {

std::vector<TensorInfo> DecoderTensors(const Shape& s, const DecoderParts& p) {
  // A negative dimension becomes 0 here; Shape::Problem() refuses such shapes before use.
  auto dim = [](int d) { return static_cast<std::size_t>(std::max(d, 0)); };
  const std::size_t C = dim(s.C), Vp = dim(s.Vp), V = dim(s.V), F = dim(s.ffn());
  const bool whole = s.NH > 0 && (s.HD > 0 || s.C % s.NH == 0);
  const std::size_t Q = whole ? dim(s.qkv_width()) : 3 * C;
  const std::size_t A = whole ? dim(s.attn_width()) : C, hs = whole ? dim(s.head_size()) : 1;
  constexpr bool L = true, D = true;  // per layer, weight decay
  using I = Init;
  const I norm = p.norm_init;
  std::vector<TensorInfo> t = {MakeTensor(kWte, "embed", !L, D, I::kNormal, {Vp, C}, V)};
  t.push_back(MakeTensor(kLn1w, "attn_norm", L, !D, norm, {C}));
  t.push_back(MakeTensor(kQkvw, "qkvw", L, D, I::kNormal, {Q, C}));
  if (p.qkv_bias) t.push_back(MakeTensor(kQkvb, "qkvb", L, !D, I::kZeros, {Q}));
  if (p.qk_norm) {
    t.push_back(MakeTensor(kQNormw, "q_norm", L, !D, norm, {hs}));
    t.push_back(MakeTensor(kKNormw, "k_norm", L, !D, norm, {hs}));
  }
  t.push_back(MakeTensor(kAttprojw, "attn_out", L, D, I::kNormal, {C, A}));
  if (p.out_bias) t.push_back(MakeTensor(kAttprojb, "attn_out_b", L, !D, I::kZeros, {C}));
  if (p.sandwich) t.push_back(MakeTensor(kLnPostAttnw, "post_attn_norm", L, !D, norm, {C}));
  t.push_back(MakeTensor(kLn2w, "mlp_norm", L, !D, norm, {C}));
  t.push_back(MakeTensor(kFcw, "gate_up", L, D, I::kNormal, {2 * F, C}));
  if (p.mlp_bias) t.push_back(MakeTensor(kFcb, "gate_up_b", L, !D, I::kZeros, {2 * F}));
  t.push_back(MakeTensor(kFcprojw, "down", L, D, I::kNormal, {C, F}));
  if (p.mlp_bias) t.push_back(MakeTensor(kFcprojb, "down_b", L, !D, I::kZeros, {C}));
  if (p.sandwich) t.push_back(MakeTensor(kLnPostMlpw, "post_mlp_norm", L, !D, norm, {C}));
  t.push_back(MakeTensor(kLnfw, "norm", !L, !D, norm, {C}));
  if (!s.tied) t.push_back(MakeTensor(kLmHead, "lm_head", !L, D, I::kNormal, {Vp, C}, V));
  return t;
}

std::string WindowOnEveryLayer(const Shape& s) {
  return s.window > 0 && (s.window_from != 0 || s.global_every != 0)
             ? "the family's sliding window is on every layer or none"
             : "";
}

std::vector<GgufTensor> LlamaGgufTensors(bool rope_permute) {
  return {{kWte, "token_embd.weight"},
          {kLn1w, "blk.{}.attn_norm.weight"},
          {kQkvw, "blk.{}.attn_q.weight", HfTensor::kQ, rope_permute},
          {kQkvw, "blk.{}.attn_k.weight", HfTensor::kK, rope_permute},
          {kQkvw, "blk.{}.attn_v.weight", HfTensor::kV},
          {kQkvb, "blk.{}.attn_q.bias", HfTensor::kQ, rope_permute},
          {kQkvb, "blk.{}.attn_k.bias", HfTensor::kK, rope_permute},
          {kQkvb, "blk.{}.attn_v.bias", HfTensor::kV},
          {kQNormw, "blk.{}.attn_q_norm.weight"},
          {kKNormw, "blk.{}.attn_k_norm.weight"},
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
          {kLmHead, "output.weight"}};
}

void DecoderGgufKeys(const std::string& arch, const Shape& s, GgufWriter& w) {
  w.Uint32(arch + ".attention.head_count_kv", s.kv_heads());
  w.Float32(arch + ".rope.freq_base", s.rope_theta);
  w.Float32(arch + ".attention.layer_norm_rms_epsilon", s.norm_eps);
  w.Uint32(arch + ".attention.key_length", s.head_size());
  w.Uint32(arch + ".attention.value_length", s.head_size());
  if (s.rope_scaling.kind == RopeScaling::kLinear) {
    w.String(arch + ".rope.scaling.type", "linear");
    w.Float32(arch + ".rope.scaling.factor", s.rope_scaling.factor);
  }
}

Shape DecoderFromConfig(const Shape& keys) {
  Shape s = keys;
  s.attn_bias = s.mlp_bias = false;
  s.types = 0;
  s.hidden_dropout = s.attn_dropout = s.head_dropout = 0;
  return s;
}

}  // namespace cputrain::model
