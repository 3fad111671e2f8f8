// Our AVX2 + FMA sgemm (kernels/own_sgemm.h).
#include "kernels/own_sgemm.h"

#include <immintrin.h>

#include <algorithm>
#include <vector>

namespace cputrain::kernels::internal {
namespace {

// A read-only strided view: element (i, j) is p[i * rs + j * cs].
struct MatView {
  const float* p;
  std::ptrdiff_t rs, cs;
};

constexpr int kMR = 6, kNR = 16;
constexpr int kMC = 168, kKC = 256, kNC = 4080;  // kMC % kMR == 0, kNC % kNR == 0

// Packs the mc x kc block of alpha A at (i0, k0) into ceil(mc/6) panels of kc x 6 (k-major),
// zero padded to a multiple of 6 rows.
void PackA(const MatView& A, float alpha, int i0, int k0, int mc, int kc, float* dst) {
  for (int ip = 0; ip < mc; ip += kMR) {
    const int m = std::min(kMR, mc - ip);
    for (int k = 0; k < kc; ++k) {
      const float* col = A.p + (k0 + k) * A.cs + (i0 + ip) * A.rs;
      int r = 0;
      if (alpha == 1.f) {
        for (; r < m; ++r) dst[r] = col[r * A.rs];
      } else {
        for (; r < m; ++r) dst[r] = alpha * col[r * A.rs];
      }
      for (; r < kMR; ++r) dst[r] = 0.f;
      dst += kMR;
    }
  }
}

// Packs the kc x nc block of B at (k0, j0) into ceil(nc/16) panels of kc x 16 (k-major), zero
// padded to a multiple of 16 columns.
void PackB(const MatView& B, int k0, int j0, int kc, int nc, float* dst) {
  for (int jp = 0; jp < nc; jp += kNR) {
    const int n = std::min(kNR, nc - jp);
    if (B.cs == 1 && n == kNR) {
      for (int k = 0; k < kc; ++k) {
        const float* row = B.p + (k0 + k) * B.rs + (j0 + jp);
        _mm256_storeu_ps(dst, _mm256_loadu_ps(row));
        _mm256_storeu_ps(dst + 8, _mm256_loadu_ps(row + 8));
        dst += kNR;
      }
    } else {
      for (int k = 0; k < kc; ++k) {
        const float* row = B.p + (k0 + k) * B.rs + (j0 + jp) * B.cs;
        int c = 0;
        for (; c < n; ++c) dst[c] = row[c * B.cs];
        for (; c < kNR; ++c) dst[c] = 0.f;
        dst += kNR;
      }
    }
  }
}

// The 6x16 micro-kernel: tile (m x n, m <= 6, n <= 16) of C (+)= a (kc x 6) @ b (kc x 16).
void Kernel6x16(int kc, const float* a, const float* b, float* c, std::ptrdiff_t ldc, int m, int n,
                bool add) {
  __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps();
  __m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
  __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
  __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
  __m256 c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps();
  __m256 c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
  for (int k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
    __m256 ak = _mm256_broadcast_ss(a + 0);
    c00 = _mm256_fmadd_ps(ak, b0, c00);
    c01 = _mm256_fmadd_ps(ak, b1, c01);
    ak = _mm256_broadcast_ss(a + 1);
    c10 = _mm256_fmadd_ps(ak, b0, c10);
    c11 = _mm256_fmadd_ps(ak, b1, c11);
    ak = _mm256_broadcast_ss(a + 2);
    c20 = _mm256_fmadd_ps(ak, b0, c20);
    c21 = _mm256_fmadd_ps(ak, b1, c21);
    ak = _mm256_broadcast_ss(a + 3);
    c30 = _mm256_fmadd_ps(ak, b0, c30);
    c31 = _mm256_fmadd_ps(ak, b1, c31);
    ak = _mm256_broadcast_ss(a + 4);
    c40 = _mm256_fmadd_ps(ak, b0, c40);
    c41 = _mm256_fmadd_ps(ak, b1, c41);
    ak = _mm256_broadcast_ss(a + 5);
    c50 = _mm256_fmadd_ps(ak, b0, c50);
    c51 = _mm256_fmadd_ps(ak, b1, c51);
    a += kMR;
    b += kNR;
  }
  const __m256 rows[kMR][2] = {{c00, c01}, {c10, c11}, {c20, c21},
                               {c30, c31}, {c40, c41}, {c50, c51}};
  if (m == kMR && n == kNR) {
    for (int r = 0; r < kMR; ++r) {
      float* cr = c + r * ldc;
      __m256 v0 = rows[r][0], v1 = rows[r][1];
      if (add) {
        v0 = _mm256_add_ps(v0, _mm256_loadu_ps(cr));
        v1 = _mm256_add_ps(v1, _mm256_loadu_ps(cr + 8));
      }
      _mm256_storeu_ps(cr, v0);
      _mm256_storeu_ps(cr + 8, v1);
    }
    return;
  }
  alignas(32) float tile[kMR][kNR];
  for (int r = 0; r < kMR; ++r) {
    _mm256_store_ps(tile[r], rows[r][0]);
    _mm256_store_ps(tile[r] + 8, rows[r][1]);
  }
  for (int r = 0; r < m; ++r) {
    float* cr = c + r * ldc;
    for (int j = 0; j < n; ++j) cr[j] = add ? cr[j] + tile[r][j] : tile[r][j];
  }
}

// C (M x N, row stride ldc) = A (M x K) @ B (K x N) scaled by alpha, or C += that with
// accumulate.
void Gemm(int M, int N, int K, float alpha, MatView A, MatView B, float* C, std::ptrdiff_t ldc,
          bool accumulate) {
  // Sized once per thread for the largest blocks; reused by every later call on the thread.
  thread_local std::vector<float> apack(static_cast<std::size_t>(kMC) * kKC);
  thread_local std::vector<float> bpack(static_cast<std::size_t>(kKC) * kNC);
  for (int j0 = 0; j0 < N; j0 += kNC) {
    const int nc = std::min(kNC, N - j0);
    for (int k0 = 0; k0 < K; k0 += kKC) {
      const int kc = std::min(kKC, K - k0);
      const bool add = accumulate || k0 > 0;
      PackB(B, k0, j0, kc, nc, bpack.data());
      for (int i0 = 0; i0 < M; i0 += kMC) {
        const int mc = std::min(kMC, M - i0);
        PackA(A, alpha, i0, k0, mc, kc, apack.data());
        for (int jr = 0; jr < nc; jr += kNR) {
          const float* bp = bpack.data() + static_cast<std::size_t>(jr / kNR) * kc * kNR;
          for (int ir = 0; ir < mc; ir += kMR) {
            const float* ap = apack.data() + static_cast<std::size_t>(ir / kMR) * kc * kMR;
            Kernel6x16(kc, ap, bp, C + (i0 + ir) * ldc + (j0 + jr), ldc, std::min(kMR, mc - ir),
                       std::min(kNR, nc - jr), add);
          }
        }
      }
    }
  }
}

}  // namespace

void OwnSgemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
              const float* B, int ldb, float beta, float* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  // beta other than 0 and 1 (no caller of ours passes one): C scaled first, then added to.
  if (beta != 0.f && beta != 1.f) {
    for (int i = 0; i < M; ++i) {
      for (int j = 0; j < N; ++j) C[static_cast<std::ptrdiff_t>(i) * ldc + j] *= beta;
    }
  }
  const bool accumulate = beta != 0.f;
  if (K <= 0 || alpha == 0.f) {
    if (!accumulate) {
      for (int i = 0; i < M; ++i) std::fill_n(C + static_cast<std::ptrdiff_t>(i) * ldc, N, 0.f);
    }
    return;
  }
  Gemm(M, N, K, alpha, ta ? MatView{A, 1, lda} : MatView{A, lda, 1},
       tb ? MatView{B, 1, ldb} : MatView{B, ldb, 1}, C, ldc, accumulate);
}

}  // namespace cputrain::kernels::internal
