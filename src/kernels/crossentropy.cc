#include <algorithm>
#include <cmath>

#include "kernels/kernels.h"
#include "kernels/vmath.h"

namespace cputrain::kernels {
namespace {

// log(sum(exp(x[0..V)))) with the max subtracted first.
float LogSumExp(const float* x, int V) {
  const std::size_t n = static_cast<std::size_t>(V);
  __m256 vmax = _mm256_set1_ps(-INFINITY);
  std::size_t j = 0;
  for (; j + 8 <= n; j += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(x + j));
  if (j < n) vmax = _mm256_max_ps(vmax, LoadPartial(x + j, n - j, -INFINITY));
  const float mx = HMax8(vmax);
  const __m256 m = _mm256_set1_ps(mx);
  __m256 acc = _mm256_setzero_ps();
  for (j = 0; j + 8 <= n; j += 8)
    acc = _mm256_add_ps(acc, Exp8(_mm256_sub_ps(_mm256_loadu_ps(x + j), m)));
  if (j < n) acc = _mm256_add_ps(acc, Exp8(_mm256_sub_ps(LoadPartial(x + j, n - j, -INFINITY), m)));
  return mx + std::log(HSum8(acc));
}

}  // namespace

void CrossEntropyForward(WorkerPool& pool, float* losses, float* lse, const float* logits,
                         const int* targets, std::size_t N, int V, int Vp) {
  pool.ParallelFor(N, [&](std::size_t b, std::size_t e, int) {
    for (std::size_t n = b; n < e; ++n) {
      const float* x = logits + n * Vp;
      const float l = LogSumExp(x, V);
      if (lse) lse[n] = l;
      losses[n] = targets[n] < 0 ? 0.f : l - x[targets[n]];
    }
  });
}

void CrossEntropyBackward(WorkerPool& pool, float* dlogits, const float* logits, const float* lse,
                          const int* targets, float dloss, std::size_t N, int V, int Vp) {
  pool.ParallelFor(N, [&](std::size_t b, std::size_t e, int) {
    const __m256 vd = _mm256_set1_ps(dloss);
    for (std::size_t n = b; n < e; ++n) {
      const float* x = logits + n * Vp;
      float* d = dlogits + n * Vp;
      const std::size_t Vs = static_cast<std::size_t>(V);
      if (targets[n] < 0) {  // ignored: no gradient
        std::fill(d, d + Vs, 0.f);
        continue;
      }
      const __m256 l = _mm256_set1_ps(lse[n]);
      std::size_t j = 0;
      for (; j + 8 <= Vs; j += 8) {
        _mm256_storeu_ps(d + j, _mm256_mul_ps(Exp8(_mm256_sub_ps(_mm256_loadu_ps(x + j), l)), vd));
      }
      if (j < Vs) {
        StorePartial(d + j, Vs - j,
                     _mm256_mul_ps(Exp8(_mm256_sub_ps(LoadPartial(x + j, Vs - j, 0.f), l)), vd));
      }
      d[targets[n]] -= dloss;
    }
  });
}

// The span loss: B rows of two strided columns, a few hundred values each, so scalar code with the
// exponentials summed in double; one task per batch row (its start and end columns interleave).
namespace {

// Whether label is a position (kept) or ignored (Hugging Face's clamp to ignore_index T).
bool Kept(int label, int T) { return label >= 0 && label < T; }

// log(sum over t of exp(x[2t])) for the column x points into.
float SpanLogSumExp(const float* x, int T) {
  float mx = -INFINITY;
  for (int t = 0; t < T; ++t) mx = std::max(mx, x[2 * t]);
  double sum = 0;
  for (int t = 0; t < T; ++t) sum += std::exp(static_cast<double>(x[2 * t]) - mx);
  return static_cast<float>(mx + std::log(sum));
}

}  // namespace

void SpanCrossEntropyForward(WorkerPool& pool, float* losses, float* lse, const float* logits,
                             const int* starts, const int* ends, int B, int T) {
  pool.ParallelFor(static_cast<std::size_t>(B), [&](std::size_t b0, std::size_t b1, int) {
    for (std::size_t b = b0; b < b1; ++b) {
      for (int k = 0; k < 2; ++k) {  // 0: start, 1: end
        const float* x = logits + b * T * 2 + k;
        const int label = (k == 0 ? starts : ends)[b];
        lse[2 * b + k] = SpanLogSumExp(x, T);
        losses[2 * b + k] = Kept(label, T) ? lse[2 * b + k] - x[2 * label] : 0.f;
      }
    }
  });
}

void SpanCrossEntropyBackward(WorkerPool& pool, float* dlogits, const float* logits,
                              const float* lse, const int* starts, const int* ends,
                              float dloss_start, float dloss_end, int B, int T) {
  pool.ParallelFor(static_cast<std::size_t>(B), [&](std::size_t b0, std::size_t b1, int) {
    for (std::size_t b = b0; b < b1; ++b) {
      for (int k = 0; k < 2; ++k) {
        const std::size_t o = b * T * 2 + k;
        const int label = (k == 0 ? starts : ends)[b];
        const float dloss = k == 0 ? dloss_start : dloss_end, l = lse[2 * b + k];
        if (!Kept(label, T)) {
          for (int t = 0; t < T; ++t) dlogits[o + 2 * t] = 0.f;
          continue;
        }
        // element by element, read before written: dlogits may be logits
        for (int t = 0; t < T; ++t) dlogits[o + 2 * t] = std::exp(logits[o + 2 * t] - l) * dloss;
        dlogits[o + 2 * label] -= dloss;
      }
    }
  });
}

}  // namespace cputrain::kernels
