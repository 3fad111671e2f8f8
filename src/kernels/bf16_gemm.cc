// Our bf16 GEMM on VDPBF16PS (kernels/bf16.h): the products of train.precision: bf16, and the
// `own-bf16` column of `bench gemm`.
//
// The Goto/BLIS structure with k taken in pairs: VDPBF16PS adds a[k]*b[k] + a[k+1]*b[k+1] into
// each fp32 lane, so A is packed as 32-bit (a[m][k], a[m][k+1]) pairs, 12 rows a panel, and B as
// pairs of its 32-column panels (one zmm = 16 columns' pairs). The 12x32 micro-kernel holds the C
// tile in 24 zmm accumulators and does, per pair of k, 2 loads of B, 12 broadcasts of A and 24
// VDPBF16PS; it prefetches its C tile into L1 first, so the read of C (+=, and every K block after
// the first) overlaps the dot products. Blocking MC = 120, NC = 4096, and K cut into equal blocks
// of at most KC = 512 (768 = 2 x 384, 512 = 1 x 512): fewer K blocks mean fewer passes over C,
// which outweighs the B micro-panel (up to 32 KiB) overflowing L1. Measured on one Zen 4 core,
// gpt2-124M's products: 170 GFLOP/s (73% of the VDPBF16PS peak) with KC = 384 and no prefetch,
// 183 with the prefetch, 191 with both (KC = 256: 178; NC 1024-4096 made no difference).
// An odd K is padded with a zero. Edges go through a tile buffer. Packing buffers
// are thread_local, sized once per thread on its first call: no allocation after that.
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/bf16_kernel.h"
#include "kernels/bf16_pack.h"

namespace cputrain::kernels {
namespace internal {
namespace {

constexpr int kMR = 12, kNR = 32;
constexpr int kMC = 120, kKC = 512, kNC = 4096;  // kMC % kMR == 0, kKC even, kNC % kNR == 0

// Interleaves n <= 32 bf16 of row r0 and row r1 (null: zeros) into n (r0[i], r1[i]) pairs.
__attribute__((target("avx512f,avx512bw"))) void InterleaveRows(const uint16_t* r0,
                                                                const uint16_t* r1, int n,
                                                                uint32_t* dst) {
  alignas(64) static constexpr uint16_t kLo[32] = {0,  32, 1,  33, 2,  34, 3,  35, 4,  36, 5,
                                                   37, 6,  38, 7,  39, 8,  40, 9,  41, 10, 42,
                                                   11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  const __mmask32 in = n >= 32 ? ~__mmask32{0} : (__mmask32{1} << n) - 1;
  const __m512i a = _mm512_maskz_loadu_epi16(in, r0);
  const __m512i b = r1 ? _mm512_maskz_loadu_epi16(in, r1) : _mm512_setzero_si512();
  const __m512i lo = _mm512_load_si512(kLo), hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
  const __mmask16 out0 = n >= 16 ? 0xffff : static_cast<__mmask16>((1u << n) - 1);
  const __mmask16 out1 = n >= 32   ? 0xffff
                         : n <= 16 ? 0
                                   : static_cast<__mmask16>((1u << (n - 16)) - 1);
  _mm512_mask_storeu_epi32(dst, out0, _mm512_permutex2var_epi16(a, lo, b));
  _mm512_mask_storeu_epi32(dst + 16, out1, _mm512_permutex2var_epi16(a, hi, b));
}

// The k-contiguous case of Pack, for `pairs` whole pairs: lane r of pair p is the 32-bit word p
// of row r (rows past `rows`, up to `width`, are zero). 16 pairs of 16 rows at a time by a word
// transpose (TransposeWords16), the last pairs by one gather of 16 rows' word p each: a gather per
// pair throughout ran the forward products (both operands k-contiguous) at 290-330 GFLOP/s per
// core on Zen 5 against 420-500 for oneDNN, the transposes brought them to (docs/bf16.md).
__attribute__((target("avx512f"))) void GatherPairs(const uint16_t* row0, std::ptrdiff_t ld,
                                                    int rows, int pairs, int width, uint32_t* dst) {
  // Byte offsets of 16 consecutive rows from the first (< 16 * ld * 2 bytes: far below 2^31).
  const __m512i offsets =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(static_cast<int>(ld * sizeof(uint16_t))));
  for (int r = 0; r < width; r += 16) {
    const int n = std::clamp(rows - r, 0, 16);
    const __mmask16 load = static_cast<__mmask16>((1u << n) - 1);
    const __mmask16 store = static_cast<__mmask16>((1u << std::min(16, width - r)) - 1);
    const uint16_t* first = row0 + (n > 0 ? r * ld : 0);
    int p = 0;
    for (; p + 16 <= pairs; p += 16) {
      TransposeWords16(first + 2 * p, ld, n, dst + static_cast<std::ptrdiff_t>(p) * width + r,
                       width, store);
    }
    const char* base = reinterpret_cast<const char*>(first);
    for (; p < pairs; ++p) {
      const __m512i v =
          _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), load, offsets, base + 4 * p, 1);
      _mm512_mask_storeu_epi32(dst + static_cast<std::ptrdiff_t>(p) * width + r, store, v);
    }
  }
}

}  // namespace

// GCC 12's avx512fintrin.h writes the unpacks with _mm512_undefined_epi32() as the masked-off
// source, which -Wuninitialized reports at every use (GCC bug 105593): a false positive. At -O1
// with -fsanitize=thread (CI's TSan build) GCC says it as -Wmaybe-uninitialized, which clang
// does not know.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
__attribute__((target("avx512f"))) void TransposeWords16(const uint16_t* src, std::ptrdiff_t ld,
                                                         int rows, uint32_t* dst,
                                                         std::ptrdiff_t ld_dst, uint16_t store) {
  __m512i r[16], a[16], b[16];
  for (int i = 0; i < 16; ++i) {
    r[i] = i < rows ? _mm512_loadu_si512(src + i * ld) : _mm512_setzero_si512();
  }
  // 32-bit interleaves within 128-bit lanes, then 64-bit ones: lane l of b[4q + j] is column
  // 4l + j of rows 4q..4q+3.
  for (int i = 0; i < 8; ++i) {
    a[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    a[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int q = 0; q < 4; ++q) {
    b[4 * q + 0] = _mm512_unpacklo_epi64(a[4 * q], a[4 * q + 2]);
    b[4 * q + 1] = _mm512_unpackhi_epi64(a[4 * q], a[4 * q + 2]);
    b[4 * q + 2] = _mm512_unpacklo_epi64(a[4 * q + 1], a[4 * q + 3]);
    b[4 * q + 3] = _mm512_unpackhi_epi64(a[4 * q + 1], a[4 * q + 3]);
  }
  // Column 4l + j gathers lane l of b[j], b[4 + j], b[8 + j], b[12 + j].
  const __mmask16 m = store;
  for (int j = 0; j < 4; ++j) {
    const __m512i u0 = _mm512_shuffle_i32x4(b[j], b[4 + j], 0x44);
    const __m512i u1 = _mm512_shuffle_i32x4(b[j], b[4 + j], 0xee);
    const __m512i v0 = _mm512_shuffle_i32x4(b[8 + j], b[12 + j], 0x44);
    const __m512i v1 = _mm512_shuffle_i32x4(b[8 + j], b[12 + j], 0xee);
    _mm512_mask_storeu_epi32(dst + (0 + j) * ld_dst, m, _mm512_shuffle_i32x4(u0, v0, 0x88));
    _mm512_mask_storeu_epi32(dst + (4 + j) * ld_dst, m, _mm512_shuffle_i32x4(u0, v0, 0xdd));
    _mm512_mask_storeu_epi32(dst + (8 + j) * ld_dst, m, _mm512_shuffle_i32x4(u1, v1, 0x88));
    _mm512_mask_storeu_epi32(dst + (12 + j) * ld_dst, m, _mm512_shuffle_i32x4(u1, v1, 0xdd));
  }
}
#pragma GCC diagnostic pop

bool PackVectorized() {
  static const bool vectorized =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  return vectorized;
}

void PackScalar(const View& v, bool by_column, int r0, int k0, int rows, int kc, int width,
                uint32_t* dst) {
  const int pairs = (kc + 1) / 2;
  for (int p = 0; p < pairs; ++p) {
    for (int r = 0; r < width; ++r) {
      uint32_t lo = 0, hi = 0;
      if (r < rows) {
        const int k = k0 + 2 * p;
        lo = by_column ? v.at(k, r0 + r) : v.at(r0 + r, k);
        if (2 * p + 1 < kc) hi = by_column ? v.at(k + 1, r0 + r) : v.at(r0 + r, k + 1);
      }
      dst[static_cast<std::ptrdiff_t>(p) * width + r] = lo | hi << 16;
    }
  }
}

// Where k pairs are contiguous in memory they are copied as 32-bit words; where they lie in two
// rows of memory they are interleaved 32 at a time.
void Pack(const View& v, bool by_column, int r0, int k0, int rows, int kc, int width,
          uint32_t* dst) {
  if (!PackVectorized()) return PackScalar(v, by_column, r0, k0, rows, kc, width, dst);
  const int pairs = (kc + 1) / 2;
  // A's rows, or B's columns, hold k contiguously when A is stored (M,K) or B is stored (N,K).
  const bool k_contiguous = by_column ? v.trans : !v.trans;
  if (k_contiguous) {
    const uint16_t* row0 = v.p + static_cast<std::ptrdiff_t>(r0) * v.ld + k0;
    GatherPairs(row0, v.ld, rows, kc / 2, width, dst);
    if (kc % 2) {  // the last pair: (k, 0)
      for (int r = 0; r < width; ++r)
        dst[(pairs - 1) * width + r] =
            r < rows ? row0[static_cast<std::ptrdiff_t>(r) * v.ld + kc - 1] : 0u;
    }
    return;
  }
  std::fill(dst, dst + static_cast<std::size_t>(pairs) * width, 0u);
  // Values of consecutive r are contiguous: row k of memory holds them.
  for (int p = 0; p < pairs; ++p) {
    const uint16_t* row0 = v.p + static_cast<std::ptrdiff_t>(k0 + 2 * p) * v.ld + r0;
    const uint16_t* row1 = 2 * p + 1 < kc ? row0 + v.ld : nullptr;
    for (int r = 0; r < rows; r += 32) {
      InterleaveRows(row0 + r, row1 ? row1 + r : nullptr, std::min(32, rows - r),
                     dst + p * width + r);
    }
  }
}

namespace {

// The mc x kc block of A at (i0, k0) as ceil(mc/12) panels of kc/2 pairs x 12 rows (pair-major),
// zero padded in rows and in the last k.
void PackA(const View& A, int i0, int k0, int mc, int kc, uint32_t* dst) {
  const std::size_t panel = static_cast<std::size_t>((kc + 1) / 2) * kMR;
  for (int ip = 0; ip < mc; ip += kMR) {
    Pack(A, false, i0 + ip, k0, std::min(kMR, mc - ip), kc, kMR, dst + ip / kMR * panel);
  }
}

// The kc x nc block of B at (k0, j0) as ceil(nc/32) panels of kc/2 pairs x 32 columns.
void PackB(const View& B, int k0, int j0, int kc, int nc, uint32_t* dst) {
  const std::size_t panel = static_cast<std::size_t>((kc + 1) / 2) * kNR;
  for (int jp = 0; jp < nc; jp += kNR) {
    Pack(B, true, j0 + jp, k0, std::min(kNR, nc - jp), kc, kNR, dst + jp / kNR * panel);
  }
}

// The 12x32 micro-kernel: tile (m x n) of C (+)= a (pairs x 12) @ b (pairs x 32).
__attribute__((target("avx512f,avx512bf16"))) void Kernel12x32(int pairs, const uint32_t* a,
                                                               const uint32_t* b, float* c, int ldc,
                                                               int m, int n, bool add) {
  __m512 acc[kMR][2];
  // Prefetch the C tile. An edge tile's rows and columns past m and n may lie past the end of C:
  // there it prefetches its last row, and its first 16 columns again.
  const int col2 = n > 16 ? 16 : 0;
  for (int r = 0; r < kMR; ++r) {
    acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    const float* cr = c + static_cast<std::ptrdiff_t>(std::min(r, m - 1)) * ldc;
    _mm_prefetch(reinterpret_cast<const char*>(cr), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(cr + col2), _MM_HINT_T0);
  }
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

void Vdpbf16psGemm(int M, int N, int K, const uint16_t* A, bool ta, int lda, const uint16_t* B,
                   bool tb, int ldb, float* C, int ldc, bool add) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    if (add) return;
    for (int i = 0; i < M; ++i)
      std::fill(C + static_cast<std::ptrdiff_t>(i) * ldc,
                C + static_cast<std::ptrdiff_t>(i) * ldc + N, 0.f);
    return;
  }
  const View a{A, ta, lda}, b{B, tb, ldb};
  // K in blocks of equal, even length <= kKC (K = 768: 2 x 384, not 512 + 256): a short last
  // block costs as many C tile passes as a full one.
  const int k_blocks = (K + kKC - 1) / kKC;
  const int kc_step = ((K + k_blocks - 1) / k_blocks + 1) / 2 * 2;
  // Sized once per thread for the largest blocks; reused by every later call on the thread.
  thread_local std::vector<uint32_t> apack(static_cast<std::size_t>(kMC) * kKC / 2);
  thread_local std::vector<uint32_t> bpack(static_cast<std::size_t>(kKC) / 2 * kNC);
  for (int j0 = 0; j0 < N; j0 += kNC) {
    const int nc = std::min(kNC, N - j0);
    for (int k0 = 0; k0 < K; k0 += kc_step) {
      const int kc = std::min(kc_step, K - k0), pairs = (kc + 1) / 2;
      PackB(b, k0, j0, kc, nc, bpack.data());
      for (int i0 = 0; i0 < M; i0 += kMC) {
        const int mc = std::min(kMC, M - i0);
        PackA(a, i0, k0, mc, kc, apack.data());
        for (int jr = 0; jr < nc; jr += kNR) {
          const uint32_t* bp = bpack.data() + static_cast<std::size_t>(jr / kNR) * pairs * kNR;
          for (int ir = 0; ir < mc; ir += kMR) {
            const uint32_t* ap = apack.data() + static_cast<std::size_t>(ir / kMR) * pairs * kMR;
            Kernel12x32(pairs, ap, bp, C + static_cast<std::ptrdiff_t>(i0 + ir) * ldc + (j0 + jr),
                        ldc, std::min(kMR, mc - ir), std::min(kNR, nc - jr), add || k0 > 0);
          }
        }
      }
    }
  }
}

}  // namespace internal
}  // namespace cputrain::kernels
