#include "model/decoder.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/error.h"

namespace cputrain::model {

Decoder::Decoder(WorkerPool& pool, const ParamLayout& layout, const float* params)
    : pool_(pool),
      layout_(layout),
      params_(params),
      acts_(layout.shape(), 1, 1, pool.size()),
      buf_(acts_.floats(), 0.f),
      cache_(layout.shape(), pool.size()) {
  acts_.Bind(buf_.data(), tokens_);
}

const float* Decoder::Feed(int token) {
  const Shape& s = layout_.shape();
  if (cache_.positions >= s.maxT) {
    throw InputError(fmt::format("the model has {} positions and all are used", s.maxT),
                     "ask for fewer tokens (--tokens) or a shorter prompt");
  }
  if (token < 0 || token >= s.V) {
    throw InputError(fmt::format("token {} is outside the model's vocabulary [0, {})", token, s.V),
                     "use the tokenizer the model was trained with");
  }
  tokens_[0] = token;
  Forward(pool_, layout_, params_, acts_, 1, 1, /*with_loss=*/false, nullptr, &cache_);
  return acts_.logits;
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
