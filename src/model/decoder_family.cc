#include "model/decoder_family.h"

#include <algorithm>

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

Shape DecoderFromConfig(const Shape& keys) {
  Shape s = keys;
  s.attn_bias = s.mlp_bias = false;
  s.types = 0;
  s.hidden_dropout = s.attn_dropout = s.head_dropout = 0;
  return s;
}

}  // namespace cputrain::model
