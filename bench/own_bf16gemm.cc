#include "bench/own_bf16gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <vector>

namespace cputrain::bench {
namespace {

constexpr int kMR = 12, kNR = 32;
constexpr int kMC = 120, kKC = 384, kNC = 4096;  // kMC % kMR == 0, kKC even, kNC % kNR == 0

// Element (i, j) of a bf16 matrix stored row-major with row stride ld, or transposed.
struct View {
  const uint16_t* p;
  bool trans;
  int ld;
  uint16_t at(int i, int j) const {
    return trans ? p[static_cast<std::ptrdiff_t>(j) * ld + i]
                 : p[static_cast<std::ptrdiff_t>(i) * ld + j];
  }
};

uint32_t Pair(uint16_t lo, uint16_t hi) { return lo | static_cast<uint32_t>(hi) << 16; }

// The mc x kc block of A at (i0, k0) as ceil(mc/12) panels of kc/2 pairs x 12 rows (pair-major),
// zero padded in rows and in the last k.
void PackA(const View& A, int i0, int k0, int mc, int kc, uint32_t* dst) {
  for (int ip = 0; ip < mc; ip += kMR) {
    const int m = std::min(kMR, mc - ip);
    for (int k = 0; k < kc; k += 2) {
      for (int r = 0; r < kMR; ++r) {
        if (r >= m) {
          *dst++ = 0;
          continue;
        }
        const uint16_t lo = A.at(i0 + ip + r, k0 + k);
        *dst++ = Pair(lo, k + 1 < kc ? A.at(i0 + ip + r, k0 + k + 1) : uint16_t{0});
      }
    }
  }
}

// The kc x nc block of B at (k0, j0) as ceil(nc/32) panels of kc/2 pairs x 32 columns.
void PackB(const View& B, int k0, int j0, int kc, int nc, uint32_t* dst) {
  for (int jp = 0; jp < nc; jp += kNR) {
    const int n = std::min(kNR, nc - jp);
    for (int k = 0; k < kc; k += 2) {
      for (int c = 0; c < kNR; ++c) {
        if (c >= n) {
          *dst++ = 0;
          continue;
        }
        const uint16_t lo = B.at(k0 + k, j0 + jp + c);
        *dst++ = Pair(lo, k + 1 < kc ? B.at(k0 + k + 1, j0 + jp + c) : uint16_t{0});
      }
    }
  }
}

// The 12x32 micro-kernel: tile (m x n) of C (+)= a (pairs x 12) @ b (pairs x 32).
__attribute__((target("avx512f,avx512bf16"))) void Kernel12x32(int pairs, const uint32_t* a,
                                                               const uint32_t* b, float* c, int ldc,
                                                               int m, int n, bool add) {
  __m512 acc[kMR][2];
  for (int r = 0; r < kMR; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int p = 0; p < pairs; ++p) {
    const __m512bh b0 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(b));
    const __m512bh b1 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(b + 16));
#pragma GCC unroll 12
    for (int r = 0; r < kMR; ++r) {
      const __m512bh ar = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(a[r])));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], ar, b0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], ar, b1);
    }
    a += kMR;
    b += kNR;
  }
  if (m == kMR && n == kNR) {
    for (int r = 0; r < kMR; ++r) {
      float* cr = c + static_cast<std::ptrdiff_t>(r) * ldc;
      if (add) {
        acc[r][0] = _mm512_add_ps(acc[r][0], _mm512_loadu_ps(cr));
        acc[r][1] = _mm512_add_ps(acc[r][1], _mm512_loadu_ps(cr + 16));
      }
      _mm512_storeu_ps(cr, acc[r][0]);
      _mm512_storeu_ps(cr + 16, acc[r][1]);
    }
    return;
  }
  alignas(64) float tile[kMR][kNR];
  for (int r = 0; r < kMR; ++r) {
    _mm512_store_ps(tile[r], acc[r][0]);
    _mm512_store_ps(tile[r] + 16, acc[r][1]);
  }
  for (int r = 0; r < m; ++r) {
    float* cr = c + static_cast<std::ptrdiff_t>(r) * ldc;
    for (int j = 0; j < n; ++j) cr[j] = add ? cr[j] + tile[r][j] : tile[r][j];
  }
}

}  // namespace

void OwnBf16Gemm(int M, int N, int K, const uint16_t* A, bool ta, int lda, const uint16_t* B,
                 bool tb, int ldb, float* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    for (int i = 0; i < M; ++i)
      std::fill(C + static_cast<std::ptrdiff_t>(i) * ldc,
                C + static_cast<std::ptrdiff_t>(i) * ldc + N, 0.f);
    return;
  }
  const View a{A, ta, lda}, b{B, tb, ldb};
  // Sized once per thread for the largest blocks; reused by every later call on the thread.
  thread_local std::vector<uint32_t> apack(static_cast<std::size_t>(kMC) * kKC / 2);
  thread_local std::vector<uint32_t> bpack(static_cast<std::size_t>(kKC) / 2 * kNC);
  for (int j0 = 0; j0 < N; j0 += kNC) {
    const int nc = std::min(kNC, N - j0);
    for (int k0 = 0; k0 < K; k0 += kKC) {
      const int kc = std::min(kKC, K - k0), pairs = (kc + 1) / 2;
      PackB(b, k0, j0, kc, nc, bpack.data());
      for (int i0 = 0; i0 < M; i0 += kMC) {
        const int mc = std::min(kMC, M - i0);
        PackA(a, i0, k0, mc, kc, apack.data());
        for (int jr = 0; jr < nc; jr += kNR) {
          const uint32_t* bp = bpack.data() + static_cast<std::size_t>(jr / kNR) * pairs * kNR;
          for (int ir = 0; ir < mc; ir += kMR) {
            const uint32_t* ap = apack.data() + static_cast<std::size_t>(ir / kMR) * pairs * kMR;
            Kernel12x32(pairs, ap, bp, C + static_cast<std::ptrdiff_t>(i0 + ir) * ldc + (j0 + jr),
                        ldc, std::min(kMR, mc - ir), std::min(kNR, nc - jr), k0 > 0);
          }
        }
      }
    }
  }
}

}  // namespace cputrain::bench
