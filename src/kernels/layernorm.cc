#include <cmath>

#include "kernels/kernels.h"
#include "kernels/vmath.h"

namespace cputrain::kernels {
namespace {
// Column chunk of the dweight/dbias pass kept in registers/L1 while rows stream by.
constexpr std::size_t kColChunk = 256;
}  // namespace

void LayerNormForward(WorkerPool& pool, float* out, float* mean, float* rstd, const float* inp,
                      const float* weight, const float* bias, std::size_t N, int C, float eps) {
  pool.ParallelFor(N, [&](std::size_t b, std::size_t e, int) {
    for (std::size_t n = b; n < e; ++n) {
      const float* x = inp + n * C;
      const float m = Sum(x, C) / C;
      float var = 0.f;
      {
        __m256 acc = _mm256_setzero_ps();
        const __m256 vm = _mm256_set1_ps(m);
        int c = 0;
        for (; c + 8 <= C; c += 8) {
          __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + c), vm);
          acc = _mm256_fmadd_ps(d, d, acc);
        }
        if (c < C) {
          __m256 d = _mm256_sub_ps(LoadPartial(x + c, C - c, m), vm);  // padded lanes give 0
          acc = _mm256_fmadd_ps(d, d, acc);
        }
        var = HSum8(acc) / C;
      }
      const float s = 1.0f / std::sqrt(var + eps);
      float* o = out + n * C;
      for (int c = 0; c < C; ++c) o[c] = (x[c] - m) * s * weight[c] + bias[c];
      mean[n] = m;
      rstd[n] = s;
    }
  });
}

void LayerNormBackward(WorkerPool& pool, float* dinp, float* dweight, float* dbias,
                       const float* dout, const float* inp, const float* weight, const float* mean,
                       const float* rstd, std::size_t N, int C, bool accumulate) {
  const int nt = pool.size();
  pool.ForEachThread([&](int tid) {
    // Rows: dinp += (w*dout - mean(w*dout) - norm*mean(w*dout*norm)) * rstd.
    std::size_t r0, r1;
    WorkerPool::Split(N, nt, tid, &r0, &r1);
    for (std::size_t n = r0; n < r1; ++n) {
      const float* x = inp + n * C;
      const float* d = dout + n * C;
      const float m = mean[n], s = rstd[n];
      __m256 a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps();
      const __m256 vm = _mm256_set1_ps(m), vs = _mm256_set1_ps(s);
      int c = 0;
      for (; c + 8 <= C; c += 8) {
        __m256 norm = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + c), vm), vs);
        __m256 dn = _mm256_mul_ps(_mm256_loadu_ps(weight + c), _mm256_loadu_ps(d + c));
        a1 = _mm256_add_ps(a1, dn);
        a2 = _mm256_fmadd_ps(dn, norm, a2);
      }
      if (c < C) {
        __m256 norm = _mm256_mul_ps(_mm256_sub_ps(LoadPartial(x + c, C - c, m), vm), vs);
        __m256 dn =
            _mm256_mul_ps(LoadPartial(weight + c, C - c, 0.f), LoadPartial(d + c, C - c, 0.f));
        a1 = _mm256_add_ps(a1, dn);
        a2 = _mm256_fmadd_ps(dn, norm, a2);
      }
      const float mean_dn = HSum8(a1) / C, mean_dnn = HSum8(a2) / C;
      float* di = dinp + n * C;
      for (int k = 0; k < C; ++k) {
        const float norm = (x[k] - m) * s;
        const float dn = weight[k] * d[k];
        di[k] += (dn - mean_dn - norm * mean_dnn) * s;
      }
    }
    // Columns: dweight = sum_n dout*norm, dbias = sum_n dout, over rows in order (a frozen
    // norm's skipped).
    if (dweight == nullptr && dbias == nullptr) return;
    std::size_t c0, c1;
    WorkerPool::Split(static_cast<std::size_t>(C), nt, tid, &c0, &c1);
    for (std::size_t cb = c0; cb < c1; cb += kColChunk) {
      const std::size_t ce = std::min(c1, cb + kColChunk);
      float dw[kColChunk] = {}, db[kColChunk] = {};
      for (std::size_t n = 0; n < N; ++n) {
        const float* x = inp + n * C;
        const float* d = dout + n * C;
        const float m = mean[n], s = rstd[n];
        for (std::size_t c = cb; c < ce; ++c) {
          dw[c - cb] += d[c] * ((x[c] - m) * s);
          db[c - cb] += d[c];
        }
      }
      for (std::size_t c = cb; c < ce; ++c) {
        if (dweight) dweight[c] = accumulate ? dweight[c] + dw[c - cb] : dw[c - cb];
        if (dbias) dbias[c] = accumulate ? dbias[c] + db[c - cb] : db[c - cb];
      }
    }
  });
}

}  // namespace cputrain::kernels
