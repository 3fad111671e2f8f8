#include "model/decoder.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/error.h"
#include "kernels/kernels.h"

namespace cputrain::model {

Decoder::Decoder(WorkerPool& pool, const ParamLayout& layout, const float* params)
    : pool_(pool), layout_(layout), params_(params) {
  const Shape& s = layout.shape();
  const std::size_t C = s.C;
  k_cache_.assign(static_cast<std::size_t>(s.L) * s.maxT * C, 0.f);
  v_cache_.assign(k_cache_.size(), 0.f);
  x_.assign(C, 0.f);
  ln_.assign(C, 0.f);
  mean_.assign(1, 0.f);
  rstd_.assign(1, 0.f);
  qkv_.assign(3 * C, 0.f);
  y_.assign(C, 0.f);
  proj_.assign(C, 0.f);
  fc_.assign(4 * C, 0.f);
  fc_gelu_.assign(4 * C, 0.f);
  att_.assign(static_cast<std::size_t>(s.NH) * s.maxT, 0.f);
  logits_.assign(s.Vp, 0.f);
}

const float* Decoder::Feed(int token) {
  namespace k = kernels;
  const Shape& s = layout_.shape();
  if (pos_ >= s.maxT) {
    throw InputError(fmt::format("the model has {} positions and all are used", s.maxT),
                     "ask for fewer tokens (--tokens) or a shorter prompt");
  }
  if (token < 0 || token >= s.V) {
    throw InputError(fmt::format("token {} is outside the model's vocabulary [0, {})", token, s.V),
                     "use the tokenizer the model was trained with");
  }
  const int C = s.C, NH = s.NH, hs = C / NH, t = pos_;
  auto P = [&](Tensor tt, int l = 0) { return params_ + layout_.offset(tt, l); };
  const float* wte = P(kWte) + static_cast<std::size_t>(token) * C;
  const float* wpe = P(kWpe) + static_cast<std::size_t>(t) * C;
  for (int c = 0; c < C; ++c) x_[c] = wte[c] + wpe[c];
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  for (int l = 0; l < s.L; ++l) {
    k::LayerNormForward(pool_, ln_.data(), mean_.data(), rstd_.data(), x_.data(), P(kLn1w, l),
                        P(kLn1b, l), 1, C);
    k::MatmulForward(pool_, qkv_.data(), ln_.data(), P(kQkvw, l), P(kQkvb, l), 1, C, 3 * C, 3 * C);
    float* kc = k_cache_.data() + (static_cast<std::size_t>(l) * s.maxT) * C;
    float* vc = v_cache_.data() + (static_cast<std::size_t>(l) * s.maxT) * C;
    std::copy(qkv_.begin() + C, qkv_.begin() + 2 * C, kc + static_cast<std::size_t>(t) * C);
    std::copy(qkv_.begin() + 2 * C, qkv_.begin() + 3 * C, vc + static_cast<std::size_t>(t) * C);
    // One query against the cached keys and values, a head per task.
    pool_.ParallelFor(static_cast<std::size_t>(NH), [&](std::size_t h0, std::size_t h1, int) {
      for (std::size_t h = h0; h < h1; ++h) {
        const float* q = qkv_.data() + h * hs;
        float* a = att_.data() + h * s.maxT;
        float mx = -INFINITY;
        for (int j = 0; j <= t; ++j) {
          const float* kj = kc + static_cast<std::size_t>(j) * C + h * hs;
          float dot = 0;
          for (int i = 0; i < hs; ++i) dot += q[i] * kj[i];
          a[j] = dot * scale;
          mx = std::max(mx, a[j]);
        }
        float sum = 0;
        for (int j = 0; j <= t; ++j) sum += (a[j] = std::exp(a[j] - mx));
        float* y = y_.data() + h * hs;
        std::fill(y, y + hs, 0.f);
        for (int j = 0; j <= t; ++j) {
          const float p = a[j] / sum;
          const float* vj = vc + static_cast<std::size_t>(j) * C + h * hs;
          for (int i = 0; i < hs; ++i) y[i] += p * vj[i];
        }
      }
    });
    k::MatmulForward(pool_, proj_.data(), y_.data(), P(kAttprojw, l), P(kAttprojb, l), 1, C, C, C);
    for (int c = 0; c < C; ++c) x_[c] += proj_[c];
    k::LayerNormForward(pool_, ln_.data(), mean_.data(), rstd_.data(), x_.data(), P(kLn2w, l),
                        P(kLn2b, l), 1, C);
    k::MatmulForward(pool_, fc_.data(), ln_.data(), P(kFcw, l), P(kFcb, l), 1, C, 4 * C, 4 * C);
    k::GeluForward(pool_, fc_gelu_.data(), fc_.data(), 4 * static_cast<std::size_t>(C));
    k::MatmulForward(pool_, proj_.data(), fc_gelu_.data(), P(kFcprojw, l), P(kFcprojb, l), 1, 4 * C,
                     C, C);
    for (int c = 0; c < C; ++c) x_[c] += proj_[c];
  }
  k::LayerNormForward(pool_, ln_.data(), mean_.data(), rstd_.data(), x_.data(), P(kLnfw), P(kLnfb),
                      1, C);
  k::MatmulForward(pool_, logits_.data(), ln_.data(), P(kWte), nullptr, 1, C, s.V, s.Vp);
  ++pos_;
  return logits_.data();
}

Sampler::Sampler(float temperature, int top_k, uint64_t seed, float top_p)
    : temperature_(temperature), top_k_(top_k), top_p_(top_p), rng_(seed) {}

int Sampler::Next(const float* logits, int V) {
  if (temperature_ <= 0) {
    return static_cast<int>(std::max_element(logits, logits + V) - logits);
  }
  order_.resize(V);
  std::iota(order_.begin(), order_.end(), 0);
  const int k = top_k_ > 0 && top_k_ < V ? top_k_ : V;
  // The nucleus needs the candidates in order of probability; top-k alone only the first k.
  if (k < V || top_p_ < 1) {
    std::partial_sort(order_.begin(), order_.begin() + k, order_.end(), [&](int a, int b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
  }
  probs_.resize(k);
  float mx = -INFINITY;
  for (int i = 0; i < k; ++i) mx = std::max(mx, logits[order_[i]]);
  double sum = 0;
  for (int i = 0; i < k; ++i)
    sum += (probs_[i] = std::exp((logits[order_[i]] - mx) / temperature_));
  int n = k;  // candidates kept
  if (top_p_ < 1) {
    double cum = 0;
    for (n = 0; n < k && (n == 0 || cum < top_p_ * sum); ++n) cum += probs_[n];
    sum = cum;
  }
  double u = std::uniform_real_distribution<double>(0.0, sum)(rng_);
  for (int i = 0; i < n; ++i) {
    u -= probs_[i];
    if (u <= 0) return order_[i];
  }
  return order_[n - 1];
}

}  // namespace cputrain::model
