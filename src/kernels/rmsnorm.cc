// RMSNorm (Llama's LlamaRMSNorm): LayerNorm without the mean and the bias, computed in fp32.
// Gemma's scales by (1 + weight): weight_offset 1 adds it to each weight as it is read (fp32,
// as Gemma3RMSNorm's 1.0 + self.weight.float()); 0 reads the weight alone, bit for bit as before.
// The same work split as LayerNorm (layernorm.cc): rows for dinp, column slices for dweight,
// each column's sum over rows in order, so the results do not depend on the pool size at all.
#include <algorithm>
#include <cmath>

#include "kernels/kernels.h"
#include "kernels/vmath.h"

namespace cputrain::kernels {
namespace {
// Column chunk of the dweight pass kept in registers/L1 while rows stream by.
constexpr std::size_t kColChunk = 256;
}  // namespace

void RmsNormForward(WorkerPool& pool, float* out, float* rstd, const float* inp,
                    const float* weight, std::size_t N, int C, float eps, float weight_offset) {
  const bool offset = weight_offset != 0.f;
  pool.ParallelFor(N, [&](std::size_t b, std::size_t e, int) {
    for (std::size_t n = b; n < e; ++n) {
      const float* x = inp + n * C;
      const float s = 1.0f / std::sqrt(Dot(x, x, C) / C + eps);
      float* o = out + n * C;
      // weight * (x * rstd), in transformers' order
      if (offset) {
        for (int c = 0; c < C; ++c) o[c] = (weight[c] + weight_offset) * (x[c] * s);
      } else {
        for (int c = 0; c < C; ++c) o[c] = weight[c] * (x[c] * s);
      }
      rstd[n] = s;
    }
  });
}

void RmsNormBackward(WorkerPool& pool, float* dinp, float* dweight, const float* dout,
                     const float* inp, const float* weight, const float* rstd, std::size_t N, int C,
                     bool accumulate, float weight_offset) {
  const int nt = pool.size();
  const __m256 voff = _mm256_set1_ps(weight_offset);
  pool.ForEachThread([&](int tid) {
    // Rows: with norm = x * rstd and dn = weight * dout, dinp += (dn - norm * mean(dn * norm)) *
    // rstd (d rstd / dx = -rstd^3 x / C).
    std::size_t r0, r1;
    WorkerPool::Split(N, nt, tid, &r0, &r1);
    for (std::size_t n = r0; n < r1; ++n) {
      const float* x = inp + n * C;
      const float* d = dout + n * C;
      const float s = rstd[n];
      const __m256 vs = _mm256_set1_ps(s);
      __m256 acc = _mm256_setzero_ps();
      int c = 0;
      for (; c + 8 <= C; c += 8) {
        __m256 norm = _mm256_mul_ps(_mm256_loadu_ps(x + c), vs);
        __m256 dn =
            _mm256_mul_ps(_mm256_add_ps(_mm256_loadu_ps(weight + c), voff), _mm256_loadu_ps(d + c));
        acc = _mm256_fmadd_ps(dn, norm, acc);
      }
      if (c < C) {
        __m256 norm = _mm256_mul_ps(LoadPartial(x + c, C - c, 0.f), vs);
        __m256 dn = _mm256_mul_ps(_mm256_add_ps(LoadPartial(weight + c, C - c, 0.f), voff),
                                  LoadPartial(d + c, C - c, 0.f));
        acc = _mm256_fmadd_ps(dn, norm, acc);
      }
      const float mean_dnn = HSum8(acc) / C;
      float* di = dinp + n * C;
      for (int k = 0; k < C; ++k)
        di[k] += ((weight[k] + weight_offset) * d[k] - x[k] * s * mean_dnn) * s;
    }
    // Columns: dweight = sum_n dout * norm, over rows in order (a frozen norm's skipped).
    if (dweight == nullptr) return;
    std::size_t c0, c1;
    WorkerPool::Split(static_cast<std::size_t>(C), nt, tid, &c0, &c1);
    for (std::size_t cb = c0; cb < c1; cb += kColChunk) {
      const std::size_t ce = std::min(c1, cb + kColChunk);
      float dw[kColChunk] = {};
      for (std::size_t n = 0; n < N; ++n) {
        const float* x = inp + n * C;
        const float* d = dout + n * C;
        const float s = rstd[n];
        for (std::size_t c = cb; c < ce; ++c) dw[c - cb] += d[c] * (x[c] * s);
      }
      for (std::size_t c = cb; c < ce; ++c)
        dweight[c] = accumulate ? dweight[c] + dw[c - cb] : dw[c - cb];
    }
  });
}

}  // namespace cputrain::kernels
