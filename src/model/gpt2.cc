#include "model/gpt2.h"

#include <fmt/format.h>
#include <sanitizer/asan_interface.h>

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "common/sanitizers.h"
#include "kernels/bf16.h"
#include "kernels/kernels.h"
#include "model/limits.h"

namespace cputrain::model {
namespace {

// Floats of red zone after each activation view under AddressSanitizer (gpt2.h, Activations).
constexpr std::size_t kRedZoneFloats = kAsan ? 16 : 0;

}  // namespace

std::string Shape::ToString() const {
  return fmt::format("L={} C={} NH={} V={} (padded {}) maxT={}", L, C, NH, V, Vp, maxT);
}

std::string Shape::Problem() const {
  struct Dim {
    const char* name;
    int value, max;
  };
  for (const Dim& d :
       {Dim{"maxT", maxT, kMaxSeqLen}, Dim{"V", V, kMaxVocab}, Dim{"Vp", Vp, kMaxVocab},
        Dim{"L", L, kMaxLayers}, Dim{"C", C, kMaxChannels}, Dim{"NH", NH, C}}) {
    if (d.value < 1 || d.value > d.max) {
      return fmt::format("{} is {}: it must be in [1, {}]", d.name, d.value, d.max);
    }
  }
  if (C % NH != 0) return fmt::format("NH ({}) does not divide C ({})", NH, C);
  if (Vp < V) return fmt::format("the padded vocabulary Vp ({}) is smaller than V ({})", Vp, V);
  // Every dimension is bounded now, so the count below cannot overflow (model/limits.h).
  const std::uint64_t n = ParamCount();
  if (n > kMaxParams) {
    return fmt::format("{} parameters are more than the {} (2^40) this build addresses", n,
                       kMaxParams);
  }
  return "";
}

std::uint64_t Shape::ParamCount() const {
  std::uint64_t total = 0;
  for (const TensorInfo& info : TensorTable(*this)) {
    std::uint64_t n = 0;
    const bool overflow =
        __builtin_mul_overflow(info.numel, info.per_layer ? std::uint64_t(L) : 1, &n) ||
        __builtin_add_overflow(total, n, &total);
    CPUTRAIN_CHECK(!overflow, "parameter count of " + ToString() + " overflows");
  }
  return total;
}

std::array<TensorInfo, kNumTensors> TensorTable(const Shape& s) {
  // Sizes in size_t: 4*C of a damaged checkpoint header (C = 600000000) must not overflow. A
  // negative dimension becomes 0 here; Shape::Problem() refuses such shapes before use.
  const std::size_t C = static_cast<std::size_t>(std::max(s.C, 0));
  const std::size_t Vp = static_cast<std::size_t>(std::max(s.Vp, 0));
  const std::size_t maxT = static_cast<std::size_t>(std::max(s.maxT, 0));
  auto t = [](const char* name, bool per_layer, bool decay, Init init,
              std::vector<std::size_t> shape) {
    TensorInfo info{name, per_layer, decay, init, std::move(shape), 1};
    for (std::size_t d : info.shape) {
      CPUTRAIN_CHECK(!__builtin_mul_overflow(info.numel, d, &info.numel),
                     fmt::format("the size of tensor {} overflows", name));
    }
    return info;
  };
  // name, per layer, weight decay, init, shape of one copy (weights are (out, in)).
  return {t("wte", false, true, Init::kNormal, {Vp, C}),
          t("wpe", false, true, Init::kNormal, {maxT, C}),
          t("ln1w", true, false, Init::kOnes, {C}),
          t("ln1b", true, false, Init::kZeros, {C}),
          t("qkvw", true, true, Init::kNormal, {3 * C, C}),
          t("qkvb", true, false, Init::kZeros, {3 * C}),
          t("attprojw", true, true, Init::kResidualNormal, {C, C}),
          t("attprojb", true, false, Init::kZeros, {C}),
          t("ln2w", true, false, Init::kOnes, {C}),
          t("ln2b", true, false, Init::kZeros, {C}),
          t("fcw", true, true, Init::kNormal, {4 * C, C}),
          t("fcb", true, false, Init::kZeros, {4 * C}),
          t("fcprojw", true, true, Init::kResidualNormal, {C, 4 * C}),
          t("fcprojb", true, false, Init::kZeros, {C}),
          t("lnfw", false, false, Init::kOnes, {C}),
          t("lnfb", false, false, Init::kZeros, {C})};
}

ParamLayout::ParamLayout(const Shape& shape) : shape_(shape), table_(TensorTable(shape)) {
  // Checkpoint headers are checked before this; a config's dimensions are each bounded, but
  // their product (the parameter count) is first judged here.
  const std::string problem = shape_.Problem();
  if (!problem.empty()) {
    throw InputError(fmt::format("the model {} cannot be built: {}", shape_.ToString(), problem),
                     "use a smaller model (model.layers, model.channels; docs/config.md gives "
                     "the limits)");
  }
  // Flat layout: wte, wpe, then the blocks, then lnf.
  std::size_t off = 0;
  for (Tensor t : {kWte, kWpe}) fixed_[t] = off, off += table_[t].numel;
  block_begin_ = off;
  for (int t = 0; t < kNumTensors; ++t) {
    if (table_[t].per_layer) in_block_[t] = block_size_, block_size_ += table_[t].numel;
  }
  off += block_size_ * shape_.L;
  for (Tensor t : {kLnfw, kLnfb}) fixed_[t] = off, off += table_[t].numel;
  total_ = off;
  // Checkpoint order: each tensor's copies for all layers, tensors in table order.
  std::size_t c = 0;
  for (int t = 0; t < kNumTensors; ++t) {
    ckpt_[t] = c;
    c += table_[t].numel * (table_[t].per_layer ? shape_.L : 1);
  }
  CPUTRAIN_CHECK(c == total_, "checkpoint and flat layouts disagree on the size");
  // Decay segments, merging neighbours with the same flag.
  auto add = [&](std::size_t b, std::size_t n, bool decay) {
    if (!segments_.empty() && segments_.back().decay == decay && segments_.back().end == b) {
      segments_.back().end = b + n;
    } else {
      segments_.push_back({b, b + n, decay});
    }
  };
  for (Tensor t : {kWte, kWpe}) add(fixed_[t], table_[t].numel, table_[t].decay);
  for (int l = 0; l < shape_.L; ++l) {
    for (int t = 0; t < kNumTensors; ++t) {
      if (table_[t].per_layer)
        add(offset(static_cast<Tensor>(t), l), table_[t].numel, table_[t].decay);
    }
  }
  for (Tensor t : {kLnfw, kLnfb}) add(fixed_[t], table_[t].numel, table_[t].decay);
}

std::size_t ParamLayout::offset(Tensor t, int layer) const {
  return table_[t].per_layer ? block_begin(layer) + in_block_[t] : fixed_[t];
}

std::size_t ParamLayout::checkpoint_offset(Tensor t, int layer) const {
  return ckpt_[t] + (table_[t].per_layer ? table_[t].numel * layer : 0);
}

namespace {

// splitmix64: a counter-based generator, so element i of a tensor gets the same value whatever
// thread computes it.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Standard normal from two 53-bit uniforms (Box-Muller), keyed by (seed, stream, index).
double Normal(uint64_t seed, uint64_t stream, uint64_t index) {
  const uint64_t a = Mix(seed ^ Mix(stream * 0x100000001b3ULL + index));
  const uint64_t b = Mix(a);
  const double u1 = (static_cast<double>(a >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
  const double u2 = static_cast<double>(b >> 11) * 0x1.0p-53;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

}  // namespace

void RandomInit(WorkerPool& pool, const ParamLayout& layout, uint64_t seed, float* params) {
  const Shape& s = layout.shape();
  const double residual_std = 0.02 / std::sqrt(2.0 * s.L);
  for (int t = 0; t < kNumTensors; ++t) {
    const TensorInfo& info = layout.info(static_cast<Tensor>(t));
    const int copies = info.per_layer ? s.L : 1;
    for (int l = 0; l < copies; ++l) {
      float* p = params + layout.offset(static_cast<Tensor>(t), l);
      // Real elements: all, except wte's padding rows [V, Vp), which stay 0 (never predicted).
      const std::size_t real = t == kWte ? static_cast<std::size_t>(s.V) * s.C : info.numel;
      const uint64_t stream = static_cast<uint64_t>(t) * 4096 + l;
      pool.ParallelFor(info.numel, [&](std::size_t b, std::size_t e, int) {
        for (std::size_t i = b; i < e; ++i) {
          double v = 0;
          switch (info.init) {
            case Init::kNormal:
              v = i < real ? 0.02 * Normal(seed, stream, i) : 0.0;
              break;
            case Init::kResidualNormal:
              v = residual_std * Normal(seed, stream, i);
              break;
            case Init::kZeros:
              v = 0;
              break;
            case Init::kOnes:
              v = 1;
              break;
          }
          p[i] = static_cast<float>(v);
        }
      });
    }
  }
}

Activations::Activations(const Shape& shape, int B, int T, int threads)
    : shape_(shape), B_(B), T_(T), threads_(threads) {
  // An upper bound of what Bind takes, in long double so that it cannot overflow: every size_t
  // product in Bind is below it, so none overflows once it is below kMaxParams (2^40 floats).
  const long double N = static_cast<long double>(B) * T, C = shape.C, L = shape.L;
  const long double tt = static_cast<long double>(T) * T;
  // 18 (B,T,C) buffers per layer and 12 outside (with the gradients), rounded up generously.
  const long double bound = N * C * (16 + 20 * L) + L * B * shape.NH * tt +
                            N * (shape.Vp + 8 + 4 * L) + static_cast<long double>(threads) * tt +
                            16 * (24 * L + 32);
  if (B < 0 || T < 0 || threads < 0 || bound > static_cast<long double>(kMaxParams)) {
    throw InputError(fmt::format("activations for B={} rows of T={} positions of the model {} "
                                 "need about {:.3g} floats, more than 2^40",
                                 B, T, shape.ToString(), static_cast<double>(bound)),
                     "lower data.batch_size or data.seq_len");
  }
  Bind(nullptr, nullptr);  // computes total_ with a null base
}

void Activations::Bind(float* base, int* tokens) {
  const std::size_t N = static_cast<std::size_t>(B_) * T_, C = shape_.C;
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
  inputs = tokens;
  targets = tokens ? tokens + N : nullptr;
  encoded = take(N * C);
  layers.assign(shape_.L, Layer{});
  for (Layer& l : layers) {
    l.ln1 = take(N * C);
    l.ln1_mean = take(N);
    l.ln1_rstd = take(N);
    l.qkv = take(N * 3 * C);
    l.att = take(static_cast<std::size_t>(B_) * shape_.NH * T_ * T_);
    l.atty = take(N * C);
    l.attproj = take(N * C);
    l.residual2 = take(N * C);
    l.ln2 = take(N * C);
    l.ln2_mean = take(N);
    l.ln2_rstd = take(N);
    l.fch = take(N * 4 * C);
    l.fch_gelu = take(N * 4 * C);
    l.fcproj = take(N * C);
    l.residual3 = take(N * C);
  }
  lnf = take(N * C);
  lnf_mean = take(N);
  lnf_rstd = take(N);
  logits = take(N * shape_.Vp);
  lse = take(N);
  losses = take(N);
  dresidual = take(N * C);
  dln = take(N * C);
  datty = take(N * C);
  dqkv = take(N * 3 * C);
  dfch = take(N * 4 * C);
  att_scratch = take(kernels::AttentionScratchFloats(threads_, T_));
  total_ = off;
}

void Activations::PoisonRedZones() {
  if (base_ == nullptr) return;
  for (const auto& [b, e] : red_zones_) {
    ASAN_POISON_MEMORY_REGION(base_ + b, (e - b) * sizeof(float));
  }
}

double Forward(WorkerPool& pool, const ParamLayout& layout, const float* params, Activations& a,
               int B, int T, bool with_loss, const Bf16Operands* bf16) {
  namespace k = kernels;
  const Shape& s = layout.shape();
  const int C = s.C;
  const std::size_t N = static_cast<std::size_t>(B) * T;
  auto P = [&](Tensor t, int l = 0) { return params + layout.offset(t, l); };
  // out (N,OC) = inp (N,IC) @ w^T + bias, in fp32 or with bf16 operands.
  auto linear = [&](float* out, const float* inp, Tensor w, const float* bias, int l, int IC,
                    int OC, int ldo) {
    if (bf16) {
      k::MatmulForwardBf16(pool, out, inp, bf16->in, bf16->weights + layout.offset(w, l), bias, N,
                           IC, OC, ldo);
    } else {
      k::MatmulForward(pool, out, inp, P(w, l), bias, N, IC, OC, ldo);
    }
  };

  a.PoisonRedZones();  // from here on, the activations are accessed view by view
  k::EncoderForward(pool, a.encoded, a.inputs, P(kWte), P(kWpe), B, T, C);
  const float* x = a.encoded;  // (B,T,C): the residual stream entering block l
  for (int l = 0; l < s.L; ++l) {
    Activations::Layer& A = a.layers[l];
    k::LayerNormForward(pool, A.ln1, A.ln1_mean, A.ln1_rstd, x, P(kLn1w, l), P(kLn1b, l), N, C);
    linear(A.qkv, A.ln1, kQkvw, P(kQkvb, l), l, C, 3 * C, 3 * C);
    if (bf16) {
      k::AttentionForwardBf16(pool, A.atty, A.att, A.qkv, bf16->in, bf16->attn, B, T, C, s.NH);
    } else {
      k::AttentionForward(pool, A.atty, A.att, A.qkv, B, T, C, s.NH);
    }
    linear(A.attproj, A.atty, kAttprojw, P(kAttprojb, l), l, C, C, C);
    k::ResidualForward(pool, A.residual2, x, A.attproj, N * C);
    k::LayerNormForward(pool, A.ln2, A.ln2_mean, A.ln2_rstd, A.residual2, P(kLn2w, l), P(kLn2b, l),
                        N, C);
    linear(A.fch, A.ln2, kFcw, P(kFcb, l), l, C, 4 * C, 4 * C);
    k::GeluForward(pool, A.fch_gelu, A.fch, N * 4 * C);
    linear(A.fcproj, A.fch_gelu, kFcprojw, P(kFcprojb, l), l, 4 * C, C, C);
    k::ResidualForward(pool, A.residual3, A.residual2, A.fcproj, N * C);
    x = A.residual3;
  }
  k::LayerNormForward(pool, a.lnf, a.lnf_mean, a.lnf_rstd, x, P(kLnfw), P(kLnfb), N, C);
  // LM head tied to wte, real vocabulary only: logits (N, Vp), columns [0, V).
  linear(a.logits, a.lnf, kWte, nullptr, 0, C, s.V, s.Vp);
  if (!with_loss) return 0.0;
  k::CrossEntropyForward(pool, a.losses, a.lse, a.logits, a.targets, N, s.V, s.Vp);
  double sum = 0;  // in position order: the same for any pool size
  for (std::size_t i = 0; i < N; ++i) sum += a.losses[i];
  return sum;
}

void Backward(WorkerPool& pool, const ParamLayout& layout, const float* params, float* grads,
              Activations& a, int B, int T, float dloss, FunctionRef<void(std::size_t)> on_ready,
              bool accumulate, const Bf16Operands* bf16) {
  namespace k = kernels;
  const bool acc = accumulate;
  const Shape& s = layout.shape();
  const int C = s.C;
  const std::size_t N = static_cast<std::size_t>(B) * T;
  auto P = [&](Tensor t, int l = 0) { return params + layout.offset(t, l); };
  auto G = [&](Tensor t, int l = 0) { return grads + layout.offset(t, l); };
  // Backward of linear(out, inp, w, b): dinp (N,IC), G(w) and dbias from dout (N,OC), stride ldd.
  auto linear_back = [&](float* dinp, Tensor w, float* dbias, int l, const float* dout,
                         const float* inp, int IC, int OC, int ldd) {
    if (bf16) {
      k::MatmulBackwardBf16(pool, dinp, G(w, l), dbias, dout, bf16->dout, inp, bf16->in,
                            bf16->weights + layout.offset(w, l), N, IC, OC, ldd, acc);
    } else {
      k::MatmulBackward(pool, dinp, G(w, l), dbias, dout, inp, P(w, l), N, IC, OC, ldd, acc);
    }
  };

  // Loss and LM head: dlogits in place; dwte = dlogits^T lnf (written), dlnf = dlogits wte.
  k::CrossEntropyBackward(pool, a.logits, a.logits, a.lse, a.targets, dloss, N, s.V, s.Vp);
  linear_back(a.dln, kWte, nullptr, 0, a.logits, a.lnf, C, s.V, s.Vp);
  // The residual stream's gradient starts at zero; LayerNormBackward adds into it.
  pool.ParallelFor(N * C, [&](std::size_t b, std::size_t e, int) {
    std::fill(a.dresidual + b, a.dresidual + e, 0.f);
  });
  const float* x_last = s.L > 0 ? a.layers[s.L - 1].residual3 : a.encoded;
  k::LayerNormBackward(pool, a.dresidual, G(kLnfw), G(kLnfb), a.dln, x_last, P(kLnfw), a.lnf_mean,
                       a.lnf_rstd, N, C, acc);
  on_ready(layout.offset(kLnfw));

  for (int l = s.L - 1; l >= 0; --l) {
    Activations::Layer& A = a.layers[l];
    const float* x = l > 0 ? a.layers[l - 1].residual3 : a.encoded;
    // a.dresidual holds d residual3 = d fcproj = d residual2 (before ln2's share is added).
    linear_back(a.dfch, kFcprojw, G(kFcprojb, l), l, a.dresidual, A.fch_gelu, 4 * C, C, C);
    k::GeluBackward(pool, a.dfch, A.fch, a.dfch, N * 4 * C);
    linear_back(a.dln, kFcw, G(kFcb, l), l, a.dfch, A.ln2, C, 4 * C, 4 * C);
    k::LayerNormBackward(pool, a.dresidual, G(kLn2w, l), G(kLn2b, l), a.dln, A.residual2,
                         P(kLn2w, l), A.ln2_mean, A.ln2_rstd, N, C, acc);
    // a.dresidual now holds d residual2 = d attproj = d x (before ln1's share is added).
    linear_back(a.datty, kAttprojw, G(kAttprojb, l), l, a.dresidual, A.atty, C, C, C);
    if (bf16) {
      k::AttentionBackwardBf16(pool, a.dqkv, a.att_scratch, bf16->attn, bf16->in, bf16->dout,
                               a.datty, A.qkv, A.att, B, T, C, s.NH);
    } else {
      k::AttentionBackward(pool, a.dqkv, a.att_scratch, a.datty, A.qkv, A.att, B, T, C, s.NH);
    }
    linear_back(a.dln, kQkvw, G(kQkvb, l), l, a.dqkv, A.ln1, C, 3 * C, 3 * C);
    k::LayerNormBackward(pool, a.dresidual, G(kLn1w, l), G(kLn1b, l), a.dln, x, P(kLn1w, l),
                         A.ln1_mean, A.ln1_rstd, N, C, acc);
    on_ready(layout.block_begin(l));
  }
  k::EncoderBackward(pool, G(kWte), G(kWpe), a.dresidual, a.inputs, B, T, C, acc);
  on_ready(0);
}

double TrainFlopsPerToken(const Shape& s, int T) {
  // 6 FLOPs per weight of the matrix products per token (2 forward, 4 backward): 12 L C^2 in the
  // blocks plus V C in the LM head; attention scores and values: 12 L T C (PaLM, appendix B;
  // counted without the causal mask, as usual). Embeddings, LayerNorm, GELU and softmax are
  // not counted. The same formula is applied to PyTorch in the benchmarks.
  const double L = s.L, C = s.C, V = s.V;
  return 6.0 * (12.0 * L * C * C + V * C) + 12.0 * L * T * C;
}

}  // namespace cputrain::model
