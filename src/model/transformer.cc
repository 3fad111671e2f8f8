#include "model/transformer.h"

#include <fmt/format.h>
#include <sanitizer/asan_interface.h>

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "common/sanitizers.h"
#include "kernels/bf16.h"
#include "kernels/kernels.h"
#include "model/family.h"
#include "model/head.h"
#include "model/limits.h"
#include "model/net.h"

namespace cputrain::model {
namespace {

// Floats of red zone after each activation view under AddressSanitizer (transformer.h,
// Activations).
constexpr std::size_t kRedZoneFloats = kAsan ? 16 : 0;

}  // namespace

Activations::Activations(const Shape& shape, int B, int T, int threads, bool checkpoint)
    : shape_(shape), B_(B), T_(T), threads_(threads), checkpoint_(checkpoint) {
  // An upper bound of what Bind takes, in long double so that it cannot overflow: every size_t
  // product in Bind is below it, so none overflows once it is below kMaxParams (2^40 floats).
  const long double N = static_cast<long double>(B) * T, L = shape.L;
  const long double tt = static_cast<long double>(T) * T;
  // Q, A, Fin, F: the family's widths (3C, C, 4C, 4C for GPT-2): the size_t products in Bind are
  // taken only once this bound is known to be below 2^40. C stands for the wider of the residual
  // and attention widths.
  const long double hs = shape.HD > 0 ? shape.HD : (shape.NH > 0 ? shape.C / shape.NH : 0);
  const long double Q = static_cast<long double>(shape.NH + 2 * shape.kv_heads()) * hs,
                    C = std::max<long double>(shape.C, shape.NH * hs), F = shape.ffn(), Fin = 2 * F;
  // 20 (B,T,C) buffers per layer and 12 outside (with the gradients), rounded up generously,
  // plus the wider ones (the q/k norm's saved heads within 2Q); and the rotary tables (twice).
  const long double bound = N * C * (16 + 20 * L) + N * (L + 1) * (2 * Q + 2 * Fin + 2 * F) +
                            L * B * shape.NH * tt + N * (shape.Vp + 8 + 4 * L) +
                            static_cast<long double>(threads) * tt + 2 * shape.maxT * C +
                            16 * (24 * L + 40);
  if (B < 0 || T < 0 || threads < 0 || bound > static_cast<long double>(kMaxParams)) {
    throw InputError(fmt::format("activations for B={} rows of T={} positions of the model {} "
                                 "need about {:.3g} floats, more than 2^40",
                                 B, T, shape.ToString(), static_cast<double>(bound)),
                     "lower data.batch_size or data.seq_len");
  }
  Bind(nullptr, nullptr);  // computes total_ with a null base
  if (shape.encoder() && shape.head == Head::kClassify) {
    CPUTRAIN_CHECK(static_cast<uint64_t>(B) * static_cast<uint64_t>(T) < (uint64_t{1} << 32),
                   "an encoder classifier's B*T must fit 32 bits (row_index)");
    packed_.row_start.assign(static_cast<std::size_t>(B) + 1, 0);
    packed_.row_index.assign(static_cast<std::size_t>(B) * T, 0);
  }
}

const Activations::Packed* Activations::Unpad(int B, int T) {
  if (!unpad || lengths == nullptr || packed_.row_start.empty()) return nullptr;
  CPUTRAIN_CHECK(B <= B_ && T <= T_, "unpadding more rows or positions than the activations hold");
  uint32_t n = 0;
  for (int b = 0; b < B; ++b) {
    packed_.row_start[b] = static_cast<int>(n);
    CPUTRAIN_CHECK(lengths[b] >= 1 && lengths[b] <= T, "a row's length must be in [1, T]");
    for (int t = 0; t < lengths[b]; ++t)
      packed_.row_index[n++] = static_cast<uint32_t>(b) * static_cast<uint32_t>(T) + t;
  }
  packed_.row_start[B] = static_cast<int>(n);
  return &packed_;
}

std::size_t Activations::TokenInts(const Shape& s, int B, int T) {
  const std::size_t rows = static_cast<std::size_t>(B);
  return 2 * rows * T + (s.head != Head::kLm ? 3 * rows : 0);
}

void Activations::Bind(float* base, int* tokens) {
  const BlockKind& kind = FamilyOf(shape_.arch).kind;
  const std::size_t N = static_cast<std::size_t>(B_) * T_, C = shape_.C;
  const std::size_t Q = shape_.qkv_width(), F = shape_.ffn(), Fin = shape_.mlp_in_width();
  const std::size_t A = shape_.attn_width(), hs = shape_.NH > 0 ? shape_.head_size() : 0;
  const std::size_t H = static_cast<std::size_t>(shape_.NH + shape_.kv_heads());
  const std::size_t rope = kind.rope ? static_cast<std::size_t>(shape_.maxT) * hs / 2 : 0;
  const bool local_rope = kind.rope && shape_.rope_local_theta > 0;
  std::size_t off = 0;
  base_ = base;
  red_zones_.clear();
  // Each piece starts on a 64-byte boundary (16 floats); under ASan a red zone follows it.
  auto take = [&](std::size_t n) {
    float* p = base ? base + off : nullptr;
    const std::size_t end = off + (n + 15) / 16 * 16 + kRedZoneFloats;
    red_zones_.emplace_back(off + n, end);
    off = end;
    return p;
  };
  // A view the family has not (RMSNorm's means, SwiGLU's and RoPE's buffers elsewhere): null, and
  // no space or red zone, so GPT-2's layout is what it was before families.
  auto take_if = [&](bool has, std::size_t n) { return has ? take(n) : nullptr; };
  inputs = tokens;
  targets = tokens ? tokens + N : nullptr;
  const bool enc = kind.encoder, task = shape_.head != Head::kLm;
  types = enc ? targets : nullptr;
  lengths = task && tokens ? tokens + 2 * N : nullptr;
  starts = task && tokens ? lengths + B_ : nullptr;
  ends = task && tokens ? starts + B_ : nullptr;
  encoded = take(N * C);
  layers.assign(shape_.L, Layer{});
  // The activation's output is recomputed from fch in the backward (llm.c's recompute), so every
  // layer shares one (B,T,F) buffer: L-1 of them fewer (BERT-base at B=32, T=128: 0.55 GB).
  float* act_out = take(N * F);
  // The projections' outputs are read by the backward only through a post-norm (Gemma's sandwich
  // norms); elsewhere they are added to the residual at once, and one (B,T,C) buffer serves both
  // projections of every layer.
  float* proj_out = take_if(!kind.sandwich_norm, N * C);
  auto proj = [&] { return kind.sandwich_norm ? take(N * C) : proj_out; };
  for (Layer& l : layers) {
    // Gradient checkpointing: every layer after the first shares the first's views but for its
    // own output (the next block's input), which Backward recomputes the block from.
    if (checkpoint_ && &l != &layers[0]) {
      l = layers[0];
      (kind.encoder ? l.ln2 : l.residual3) = take(N * C);
      continue;
    }
    l.ln1 = take(N * C);
    l.ln1_mean = take_if(!kind.rms_norm, N);
    l.ln1_rstd = take(N);
    l.qkv = take(N * Q);
    l.qk_saved = take_if(kind.qk_norm, N * H * hs);
    l.qk_rstd = take_if(kind.qk_norm, N * H);
    l.att = take(static_cast<std::size_t>(B_) * shape_.NH * T_ * T_);
    l.atty = take(N * A);
    l.attproj = proj();
    l.attn_post = take_if(kind.sandwich_norm, N * C);
    l.attn_post_rstd = take_if(kind.sandwich_norm, N);
    l.residual2 = take(N * C);
    l.ln2 = take(N * C);
    l.ln2_mean = take_if(!kind.rms_norm, N);
    l.ln2_rstd = take(N);
    l.fch = take(N * Fin);
    l.fch_gelu = act_out;
    l.fcproj = proj();
    l.mlp_post = take_if(kind.sandwich_norm, N * C);
    l.mlp_post_rstd = take_if(kind.sandwich_norm, N);
    l.residual3 = take(N * C);
  }
  lnf = take(N * C);
  lnf_mean = take_if(!kind.rms_norm, N);
  lnf_rstd = take(N);
  logits = take(N * shape_.head_width());
  lse = take(std::max<std::size_t>(N, 2 * B_));
  losses = take(std::max<std::size_t>(N, 2 * B_));
  dresidual = take(N * C);
  dln = take(N * C);
  datty = take(N * A);
  dqkv = take(N * Q);
  dfch = take(N * Fin);
  att_scratch = take(kernels::AttentionScratchFloats(threads_, T_));
  // Views only some families have (empty otherwise) come last, so GPT-2's layout is unchanged.
  dfch_act = take_if(kind.swiglu || kind.geglu, N * F);
  rope_cos = take_if(kind.rope, rope);
  rope_sin = take_if(kind.rope, rope);
  rope_cos_local = take_if(local_rope, rope);
  rope_sin_local = take_if(local_rope, rope);
  emb = take_if(enc, N * C);
  emb_mean = take_if(enc, N);
  emb_rstd = take_if(enc, N);
  const bool cls = shape_.head == Head::kClassify;
  const std::size_t BC = static_cast<std::size_t>(B_) * C;
  cls_in = take_if(cls, BC);
  cls_pre = take_if(cls, BC);
  cls_out = take_if(cls, BC);
  cls_dout = take_if(cls, BC);
  cls_din = take_if(cls, BC);
  label_values = take_if(cls, static_cast<std::size_t>(B_) * std::max(shape_.labels, 1));
  rope_ready = false;
  total_ = off;
}

void Activations::PoisonRedZones() {
  if (base_ == nullptr) return;
  for (const auto& [b, e] : red_zones_) {
    ASAN_POISON_MEMORY_REGION(base_ + b, (e - b) * sizeof(float));
  }
}

std::size_t Bf16Operands::InElems(const Shape& s, int B, int T) {
  const std::size_t w = std::max({s.C, s.ffn(), s.qkv_width(), s.attn_width()});
  return static_cast<std::size_t>(B) * T * w;
}

std::size_t Bf16Operands::DoutElems(const Shape& s, int B, int T) {
  const int fin = s.mlp_in_width();
  const std::size_t w = std::max({s.qkv_width(), fin, s.Vp, s.C});
  return static_cast<std::size_t>(B) * T * w;
}

KvCache::KvCache(const Shape& s, int threads_)
    : layers(s.L),
      max_positions(s.maxT),
      threads(threads_),
      row(static_cast<std::size_t>(s.kv_heads()) * s.head_size()) {
  Reserve(std::min(s.maxT, 1024));
}

void KvCache::Reserve(int n) {
  if (n <= capacity) return;
  CPUTRAIN_CHECK(n <= max_positions, "a KV cache past the model's positions");
  int grown = std::max(capacity, 1);
  while (grown < n) grown = static_cast<int>(std::min<long long>(2LL * grown, max_positions));
  const std::size_t old_layer = static_cast<std::size_t>(capacity) * row,
                    new_layer = static_cast<std::size_t>(grown) * row,
                    filled = static_cast<std::size_t>(positions) * row;
  for (std::vector<float>* c : {&k, &v}) {
    std::vector<float> next(static_cast<std::size_t>(layers) * new_layer);
    for (int l = 0; l < layers && filled > 0; ++l) {
      std::copy_n(c->data() + l * old_layer, filled, next.data() + l * new_layer);
    }
    c->swap(next);
  }
  scratch.assign(static_cast<std::size_t>(threads) * grown, 0.f);  // AttentionDecode's
  capacity = grown;
}

namespace {

// Fills the rotary tables once after Bind: the global ones (rope_theta with its scaling) and the
// windowed layers' own (rope_local_theta, no scaling), if the family has them.
void FillRopeTables(const Shape& s, int hs, Activations& a) {
  kernels::RopeScaling scaling;
  const RopeScaling& r = s.rope_scaling;
  scaling.kind = r.kind == RopeScaling::kLlama3   ? kernels::RopeScaling::kLlama3
                 : r.kind == RopeScaling::kLinear ? kernels::RopeScaling::kLinear
                                                  : kernels::RopeScaling::kNone;
  scaling.factor = r.factor;
  scaling.low_freq_factor = r.low_freq_factor;
  scaling.high_freq_factor = r.high_freq_factor;
  scaling.original_max_position = r.original_max_position;
  kernels::RopeTables(a.rope_cos, a.rope_sin, s.maxT, hs, s.rope_theta, scaling);
  if (a.rope_cos_local) {
    kernels::RopeTables(a.rope_cos_local, a.rope_sin_local, s.maxT, hs, s.rope_local_theta, {});
  }
  a.rope_ready = true;
}

// Layer l's rotary tables: a windowed layer's own where the family has them.
std::pair<const float*, const float*> RopeOf(const Shape& s, const Activations& a, int l) {
  if (a.rope_cos_local && s.windowed(l)) return {a.rope_cos_local, a.rope_sin_local};
  return {a.rope_cos, a.rope_sin};
}

// Layer l's attention: its window, the family's score scale, and packed rows' documents.
kernels::AttentionOptions AttentionOf(const Net& n, int l, const Activations& a) {
  kernels::AttentionOptions opt;
  opt.doc_start = a.packed_doc_start();
  opt.window = n.s.windowed(l) ? n.s.window : 0;
  opt.scale = n.attn_scale;
  return opt;
}

// Gemma's embedding scale, sqrt(C) rounded to fp32 (Gemma3TextScaledWordEmbedding's
// torch.tensor(hidden_size**0.5), in the weights' dtype).
float EmbedScale(const Shape& s) { return static_cast<float>(std::sqrt(static_cast<double>(s.C))); }

// A.fch_gelu (N,F) = the MLP's activation of A.fch (N,Fin): SwiGLU, GeGLU or tanh GELU. The
// forward's, and the backward's recompute of it (the buffer is shared by the layers): the same
// bits both times.
void MlpActivation(WorkerPool& pool, const Net& n, Activations::Layer& A, std::size_t N) {
  if (n.kind.swiglu) {
    kernels::SwigluForward(pool, A.fch_gelu, A.fch, N, n.F);
  } else if (n.kind.geglu) {
    kernels::GegluForward(pool, A.fch_gelu, A.fch, N, n.F);
  } else {
    kernels::GeluForward(pool, A.fch_gelu, A.fch, N * n.F);
  }
}

// A pass of B rows of T must fit the activations it runs in (their views are laid out for them).
void CheckFits(const Activations& a, int B, int T) {
  CPUTRAIN_CHECK(B <= a.B() && T <= a.T(),
                 "a pass over more rows or positions than its activations were made for");
}

// Generation (B == 1): appends the T new positions' keys and values to layer l's cache, then each
// attends to the cache up to itself (a windowed layer: to its window's positions only).
void DecodeAttention(WorkerPool& pool, const Net& n, int l, Activations::Layer& A, KvCache& cache,
                     int T) {
  const Shape& s = n.s;
  const int pos0 = cache.positions;
  const std::size_t kvw = static_cast<std::size_t>(n.KV) * n.hs;
  const std::size_t layer0 = static_cast<std::size_t>(l) * cache.capacity * kvw;
  for (int t = 0; t < T; ++t) {
    const float* row = A.qkv + static_cast<std::size_t>(t) * n.Q;
    const std::size_t at = layer0 + static_cast<std::size_t>(pos0 + t) * kvw;
    std::copy(row + n.NH * n.hs, row + n.NH * n.hs + kvw, cache.k.data() + at);
    std::copy(row + n.NH * n.hs + kvw, row + n.NH * n.hs + 2 * kvw, cache.v.data() + at);
  }
  const int window = s.windowed(l) ? s.window : 0;
  for (int t = 0; t < T; ++t) {
    const int last = pos0 + t, first = window > 0 ? std::max(0, last - window + 1) : 0;
    const std::size_t from = layer0 + static_cast<std::size_t>(first) * kvw;
    kernels::AttentionDecode(pool, A.atty + static_cast<std::size_t>(t) * n.A, cache.scratch.data(),
                             A.qkv + static_cast<std::size_t>(t) * n.Q, cache.k.data() + from,
                             cache.v.data() + from, last - first + 1, n.NH, n.KV, n.hs,
                             static_cast<int>(kvw), n.attn_scale);
  }
}

// The inputs whose embedding row learns nothing (nn.Embedding's padding_idx: Gemma's pad token
// 0, Phi-3's 32000): their positions' share of the embedding gradient dropped.
void DropPadRows(WorkerPool& pool, float* dx, const int* inputs, std::size_t N, int C, int pad) {
  pool.ParallelFor(N, [&](std::size_t b, std::size_t e, int) {
    for (std::size_t i = b; i < e; ++i)
      if (inputs[i] == pad) std::fill_n(dx + i * C, C, 0.f);
  });
}

// The embeddings' gradients from a.dresidual (d of the blocks' input): added to the LM head's
// share when tied (written by the head's backward); an untied model's starts at zero here (each
// row the batch does not use stays zero). Frozen (LoRA, not saved): nothing to do.
void EmbeddingBackward(WorkerPool& pool, const Net& n, Activations& a, bool tied, bool acc) {
  const Shape& s = n.s;
  const int B = n.B, T = n.T, C = n.C;
  float* dwte = n.G(kWte);
  float* dwpe = n.G(kWpe);
  if (dwte && !tied && !acc) ZeroFill(pool, dwte, n.layout.info(kWte).numel);
  if (dwte || dwpe) {
    // nn.Embedding(padding_idx): the padding row learns nothing through the lookup (a tied
    // head's gradient into it stays), in the families whose embedding has one.
    if (s.pad_token >= 0 && n.kind.embed_padding_idx)
      DropPadRows(pool, a.dresidual, a.inputs, n.N, C, s.pad_token);
    if (n.kind.embed_scale) kernels::ScaleInPlace(pool, a.dresidual, n.N * C, EmbedScale(s));
    kernels::EncoderBackward(pool, dwte, dwpe, a.dresidual, a.inputs, B, T, C, acc);
  }
  // Positions past this batch's T (a task's dynamic padding): no gradient, not a stale one.
  if (dwpe && !acc)
    std::fill(dwpe + static_cast<std::size_t>(T) * C, dwpe + static_cast<std::size_t>(s.maxT) * C,
              0.f);
}

// One decoder block's pass, shared by Forward and by Backward's recompute (gradient
// checkpointing): the same kernels in the same order, so the recomputed views hold the same bits.
struct DecoderBlock {
  WorkerPool& pool;
  const Net& n;
  Activations& a;
  const Bf16Operands* bf16;
  KvCache* cache;  // generation (B == 1), else null

  void Linear(float* out, const float* inp, Tensor w, Tensor b, int l, int IC, int OC,
              int ldo) const {
    n.Linear(pool, bf16, out, inp, w, b, l, IC, OC, ldo);
  }
  void Norm(float* out, float* mean, float* rstd, const float* inp, Tensor w, Tensor b,
            int l) const {
    if (n.kind.rms_norm) {
      kernels::RmsNormForward(pool, out, rstd, inp, n.P(w, l), n.N, n.C, n.s.norm_eps,
                              n.norm_offset);
    } else {
      kernels::LayerNormForward(pool, out, mean, rstd, inp, n.P(w, l), n.P(b, l), n.N, n.C,
                                n.s.norm_eps);
    }
  }
  // Block l from x (B,T,C), the residual stream entering it, into a.layers[l]. whole = false: a
  // recompute for the block's backward, which stops where the backward stops reading: the MLP's
  // output product and its post-norm run only where a post-norm reads them (Gemma), and the block's
  // output (residual3, kept per layer) is not written again.
  void Forward(int l, const float* x, bool whole) const {
    namespace k = kernels;
    const int B = n.B, T = n.T, C = n.C;
    const std::size_t N = n.N;
    const int pos0 = cache ? cache->positions : 0;
    Activations::Layer& A = a.layers[l];
    Norm(A.ln1, A.ln1_mean, A.ln1_rstd, x, kLn1w, kLn1b, l);
    Linear(A.qkv, A.ln1, kQkvw, kQkvb, l, C, n.Q, n.Q);
    if (n.kind.qk_norm) {
      k::QkNormForward(pool, A.qkv, A.qk_saved, A.qk_rstd, n.P(kQNormw, l), n.P(kKNormw, l), N,
                       n.NH, n.KV, n.hs, n.s.norm_eps, n.norm_offset);
    }
    if (n.kind.rope) {
      const auto [cos, sin] = RopeOf(n.s, a, l);
      k::RopeForward(pool, A.qkv, cos, sin, B, T, n.NH, n.KV, n.hs, pos0,
                     cache ? nullptr : a.packed_positions());
    }
    if (cache) {
      DecodeAttention(pool, n, l, A, *cache, T);
    } else if (bf16) {
      k::AttentionForwardBf16(pool, A.atty, A.att, A.qkv, bf16->in, bf16->attn, B, T, n.A, n.NH,
                              n.KV, AttentionOf(n, l, a));
    } else {
      k::AttentionForward(pool, A.atty, A.att, A.qkv, B, T, n.A, n.NH, n.KV, AttentionOf(n, l, a));
    }
    Linear(A.attproj, A.atty, kAttprojw, kAttprojb, l, n.A, C, C);
    const float* attn_out = A.attproj;
    if (n.kind.sandwich_norm) {
      Norm(A.attn_post, nullptr, A.attn_post_rstd, A.attproj, kLnPostAttnw, kNumTensors, l);
      attn_out = A.attn_post;
    }
    k::ResidualForward(pool, A.residual2, x, attn_out, N * C);
    Norm(A.ln2, A.ln2_mean, A.ln2_rstd, A.residual2, kLn2w, kLn2b, l);
    Linear(A.fch, A.ln2, kFcw, kFcb, l, C, n.Fin, n.Fin);
    if (!whole && !n.kind.sandwich_norm) return;
    MlpActivation(pool, n, A, N);
    Linear(A.fcproj, A.fch_gelu, kFcprojw, kFcprojb, l, n.F, C, C);
    const float* mlp_out = A.fcproj;
    if (n.kind.sandwich_norm) {
      Norm(A.mlp_post, nullptr, A.mlp_post_rstd, A.fcproj, kLnPostMlpw, kNumTensors, l);
      mlp_out = A.mlp_post;
    }
    if (whole) k::ResidualForward(pool, A.residual3, A.residual2, mlp_out, N * C);
  }
};

}  // namespace

double Forward(WorkerPool& pool, const ParamLayout& layout, const float* params, Activations& a,
               int B, int T, bool with_loss, const Bf16Operands* bf16, KvCache* cache,
               const LoraPass* lora) {
  namespace k = kernels;
  CPUTRAIN_CHECK(cache == nullptr || lora == nullptr,
                 "generation runs the merged model (LoraMerge), not the adapters");
  CheckFits(a, B, T);
  if (layout.shape().encoder()) {
    CPUTRAIN_CHECK(cache == nullptr, "an encoder has no KV cache");
    return EncoderForwardPass(pool, layout, params, a, B, T, with_loss, bf16, lora);
  }
  const Net n(layout, B, T, params, nullptr, lora, a.dropout);
  const Shape& s = n.s;
  const int C = n.C;
  const std::size_t N = n.N;
  const int pos0 = cache ? cache->positions : 0;
  if (cache) cache->Reserve(pos0 + T);
  const DecoderBlock block{pool, n, a, bf16, cache};

  a.PoisonRedZones();  // from here on, the activations are accessed view by view
  if (n.kind.rope && !a.rope_ready) FillRopeTables(s, n.hs, a);
  const float* wpe = n.P(kWpe);
  k::EncoderForward(pool, a.encoded, a.inputs, n.P(kWte),
                    wpe ? wpe + static_cast<std::size_t>(pos0) * C : nullptr, B, T, C);
  if (n.kind.embed_scale) k::ScaleInPlace(pool, a.encoded, N * C, EmbedScale(s));
  const float* x = a.encoded;  // (B,T,C): the residual stream entering block l
  for (int l = 0; l < s.L; ++l) {
    block.Forward(l, x, true);
    x = a.layers[l].residual3;
  }
  if (cache) cache->positions += T;
  block.Norm(a.lnf, a.lnf_mean, a.lnf_rstd, x, kLnfw, kLnfb, 0);
  // A classifier (model/head.h): the last real token's state through its score.
  if (s.head == Head::kClassify) return ClassifyForward(pool, n, a, a.lnf, bf16, with_loss, {});
  // LM head (tied to the embedding or its own tensor), real vocabulary only: logits (N, Vp),
  // columns [0, V).
  block.Linear(a.logits, a.lnf, layout.head(), kNumTensors, 0, C, s.V, s.Vp);
  if (!with_loss) return 0.0;
  k::CrossEntropyForward(pool, a.losses, a.lse, a.logits, a.targets, N, s.V, s.Vp);
  double sum = 0;  // in position order: the same for any pool size
  for (std::size_t i = 0; i < N; ++i) sum += a.losses[i];
  return sum;
}

void Backward(WorkerPool& pool, const ParamLayout& layout, const float* params, float* grads,
              Activations& a, int B, int T, float dloss, FunctionRef<void(std::size_t)> on_ready,
              bool accumulate, const Bf16Operands* bf16, const LoraPass* lora) {
  namespace k = kernels;
  CheckFits(a, B, T);
  if (layout.shape().encoder()) {
    EncoderBackwardPass(pool, layout, params, grads, a, B, T, dloss, on_ready, accumulate, bf16,
                        lora);
    return;
  }
  const bool acc = accumulate;
  const Net n(layout, B, T, params, grads, lora, a.dropout);
  const Shape& s = n.s;
  const int C = n.C;
  const std::size_t N = n.N;
  auto P = [&](Tensor t, int l = 0) { return n.P(t, l); };
  auto G = [&](Tensor t, int l = 0) { return n.G(t, l); };  // null: frozen (LoRA)
  // Backward of linear(out, inp, w, b): dinp (N,IC), G(w) and dbias from dout (N,OC), stride ldd.
  auto linear_back = [&](float* dinp, Tensor w, Tensor b, int l, const float* dout,
                         const float* inp, int IC, int OC, int ldd) {
    n.LinearBack(pool, bf16, dinp, w, b, l, dout, inp, IC, OC, ldd, acc);
  };
  // dinp += d norm(inp)/d inp applied to dout; the norm's weight (and bias) gradients.
  auto norm_back = [&](float* dinp, const float* dout, const float* inp, const float* mean,
                       const float* rstd, Tensor w, Tensor b, int l) {
    if (n.kind.rms_norm) {
      k::RmsNormBackward(pool, dinp, G(w, l), dout, inp, P(w, l), rstd, N, C, acc, n.norm_offset);
    } else {
      k::LayerNormBackward(pool, dinp, G(w, l), G(b, l), dout, inp, P(w, l), mean, rstd, N, C, acc);
    }
  };
  // The gradient of a post-norm's input (Gemma's norms after attention and the MLP) from its
  // output's, dy: into a.dln (zeroed first: norm_back adds). Without post-norms: dy itself.
  auto post_norm_back = [&](const float* dy, const float* inp, const float* rstd, Tensor w,
                            int l) -> const float* {
    if (!n.kind.sandwich_norm) return dy;
    ZeroFill(pool, a.dln, N * C);
    norm_back(a.dln, dy, inp, nullptr, rstd, w, kNumTensors, l);
    return a.dln;
  };

  // Loss and LM head: dlogits in place; dhead = dlogits^T lnf (written), dlnf = dlogits head.
  // A classifier's head instead (model/head.h).
  const bool lm = s.head == Head::kLm;
  if (lm) {
    k::CrossEntropyBackward(pool, a.logits, a.logits, a.lse, a.targets, dloss, N, s.V, s.Vp);
    linear_back(a.dln, layout.head(), kNumTensors, 0, a.logits, a.lnf, C, s.V, s.Vp);
  } else {
    ClassifyBackward(pool, n, a, a.dln, bf16, dloss, acc, {});
  }
  // The residual stream's gradient starts at zero; the norms' backward adds into it.
  ZeroFill(pool, a.dresidual, N * C);
  const float* x_last = s.L > 0 ? a.layers[s.L - 1].residual3 : a.encoded;
  norm_back(a.dresidual, a.dln, x_last, a.lnf_mean, a.lnf_rstd, kLnfw, kLnfb, 0);
  on_ready(n.trained().output_begin());

  const DecoderBlock block{pool, n, a, bf16, nullptr};
  for (int l = s.L - 1; l >= 0; --l) {
    Activations::Layer& A = a.layers[l];
    const float* x = l > 0 ? a.layers[l - 1].residual3 : a.encoded;
    // Gradient checkpointing: the block's views again from its kept input (the last block's are
    // still the forward's).
    if (a.checkpointed() && l < s.L - 1) block.Forward(l, x, false);
    // a.dresidual holds d residual3 = d (the MLP's output) = d residual2 (before ln2's share is
    // added); the MLP's output is fcproj, or its post-norm's.
    const float* dmlp = post_norm_back(a.dresidual, A.fcproj, A.mlp_post_rstd, kLnPostMlpw, l);
    // fch_gelu is shared by the layers: this layer's again, where fcproj's backward reads it.
    if (n.ReadsInput(kFcprojw, l)) MlpActivation(pool, n, A, N);
    if (n.kind.swiglu || n.kind.geglu) {
      linear_back(a.dfch_act, kFcprojw, kFcprojb, l, dmlp, A.fch_gelu, n.F, C, C);
      if (n.kind.swiglu) {
        k::SwigluBackward(pool, a.dfch, A.fch, a.dfch_act, N, n.F);
      } else {
        k::GegluBackward(pool, a.dfch, A.fch, a.dfch_act, N, n.F);
      }
    } else {
      linear_back(a.dfch, kFcprojw, kFcprojb, l, dmlp, A.fch_gelu, n.F, C, C);
      k::GeluBackward(pool, a.dfch, A.fch, a.dfch, N * n.F);
    }
    linear_back(a.dln, kFcw, kFcb, l, a.dfch, A.ln2, C, n.Fin, n.Fin);
    norm_back(a.dresidual, a.dln, A.residual2, A.ln2_mean, A.ln2_rstd, kLn2w, kLn2b, l);
    // a.dresidual now holds d residual2 = d (attention's output) = d x (before ln1's share).
    const float* dattn = post_norm_back(a.dresidual, A.attproj, A.attn_post_rstd, kLnPostAttnw, l);
    linear_back(a.datty, kAttprojw, kAttprojb, l, dattn, A.atty, n.A, C, C);
    if (bf16) {
      k::AttentionBackwardBf16(pool, a.dqkv, a.att_scratch, bf16->attn, bf16->in, bf16->dout,
                               a.datty, A.qkv, A.att, B, T, n.A, n.NH, n.KV, AttentionOf(n, l, a));
    } else {
      k::AttentionBackward(pool, a.dqkv, a.att_scratch, a.datty, A.qkv, A.att, B, T, n.A, n.NH,
                           n.KV, AttentionOf(n, l, a));
    }
    if (n.kind.rope) {
      const auto [cos, sin] = RopeOf(s, a, l);
      k::RopeBackward(pool, a.dqkv, cos, sin, B, T, n.NH, n.KV, n.hs, a.packed_positions());
    }
    if (n.kind.qk_norm) {
      k::QkNormBackward(pool, a.dqkv, G(kQNormw, l), G(kKNormw, l), A.qk_saved, A.qk_rstd,
                        P(kQNormw, l), P(kKNormw, l), N, n.NH, n.KV, n.hs, n.norm_offset, acc);
    }
    linear_back(a.dln, kQkvw, kQkvb, l, a.dqkv, A.ln1, C, n.Q, n.Q);
    norm_back(a.dresidual, a.dln, x, A.ln1_mean, A.ln1_rstd, kLn1w, kLn1b, l);
    on_ready(n.trained().block_begin(l));
  }
  EmbeddingBackward(pool, n, a, lm && layout.head() == kWte, acc);
  on_ready(0);
}

double TrainFlopsPerToken(const Shape& s, int T) {
  // 6 FLOPs per weight of the matrix products per token (2 forward, 4 backward): per block the
  // qkv (Q x C), attention output (C x A), MLP input (Fin x C) and output (C x F) weights —
  // 12 C^2 for GPT-2 — plus V C in the LM head; attention scores and values: 12 L T A (PaLM,
  // appendix B; counted without the causal mask or a sliding window, as usual). Embeddings, norms,
  // activations and softmax are not counted. The same formula is applied to PyTorch in the
  // benchmarks. An encoder's head: a span head's 2 x C per position; a classifier's (C + labels) x
  // C per sequence, counted per token as a share of T.
  const int fin = s.mlp_in_width();
  const double L = s.L, C = s.C, A = s.attn_width();
  const double pool = FamilyOf(s.arch).classify_pooling == Pooling::kLastToken ? 0 : C;
  const double head = s.head == Head::kLm     ? static_cast<double>(s.V)
                      : s.head == Head::kSpan ? 2.0
                                              : (pool + s.labels) / std::max(T, 1);
  const double block = C * s.qkv_width() + A * C + C * fin + static_cast<double>(s.ffn()) * C;
  return 6.0 * (L * block + head * C) + 12.0 * L * T * A;
}

}  // namespace cputrain::model
