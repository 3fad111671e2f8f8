// kernels/amx_gemm.h (internal to kernels/): our AMX bf16 GEMM, written once against the tile
// interface of amx_tiles.h and instantiated twice: on the real tiles (amx_real.cc) and on the
// portable TileModel (amx_gemm.cc), so that every line of it but the instructions themselves is
// tested on any CPU.
//
//   C (M,N) fp32 (+)= A (M,K) bf16 @ B (K,N) bf16, A and B at any strides, either transposed.
//
// Structure (Goto/BLIS, as the VDPBF16PS kernel, bf16_gemm.cc): for each NC-wide column block:
// for each K block (equal blocks of at most KC, each rounded up to a multiple of 32, the k of one
// tile step): pack B into 32-column panels of pair rows (amx_tiles.h's B operand: row p holds the
// (b[2p][j], b[2p+1][j]) words of 32 columns, 128 bytes: the two B tiles of a step are its left
// and right 64 bytes); for each MC-tall row block: pack A into rows of K-contiguous bf16 (row
// stride kp, a multiple of 32: each 64-byte piece is one A tile row); for each 32 x 32 block of C:
// the micro-kernel.
//
// Micro-kernel: the 32 x 32 block of C in 4 accumulator tiles (tmm0..tmm3, 16 x 16 fp32 each),
// loaded from C (accumulate, or a K block after the first) or zeroed; per step of 32 k: 2 A tiles
// (tmm4, tmm5: 16 rows x 32 k), 2 B tiles (tmm6, tmm7: 16 pairs x 16 columns) and 4 TDPBF16PS;
// then the 4 tiles stored to C. An edge block (fewer than 32 rows or columns of C) runs on a local
// 32 x 32 buffer; the packs are zero past the matrix, so the padded products add zeros.
// Padding: K rounded up to a multiple of 32 per K block (an odd K's last pair gets a zero), M and
// N to multiples of 32; none of it changes a result.
//
// Tile configuration: every call configures its thread's tiles (LDTILECFG, all 8 tiles 16 rows x
// 64 bytes) and releases them at the end (TILERELEASE), so a call never depends on what another
// library (oneDNN) left in the tile configuration, and a thread holds no tile state between
// calls. Summation order: K blocks in order, within a block the instruction's own; it depends on K
// alone, so results are bit-identical for any split of M and N between threads.
//
// Thread safety: reentrant; the packing buffers are the caller's (AmxScratch, per thread).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/amx_tiles.h"
#include "kernels/bf16_pack.h"

namespace cputrain::kernels::amx {

inline constexpr int kMR = 32, kNR = 32;  // the micro-kernel's block of C
inline constexpr int kKStep = 32;         // k per tile step (64 bytes of bf16 in an A row)
inline constexpr int kMC = 128, kKC = 512, kNC = 4096;

// One thread's packing buffers, sized once for the largest blocks.
struct AmxScratch {
  std::vector<uint16_t> a = std::vector<uint16_t>(static_cast<std::size_t>(kMC) * kKC);
  std::vector<uint32_t> b = std::vector<uint32_t>(static_cast<std::size_t>(kKC) / 2 * kNC);
  std::vector<uint32_t> t = std::vector<uint32_t>(static_cast<std::size_t>(kKC) / 2 * kMR);
};

// The K blocking: blocks of equal length (the last shorter), each a multiple of kKStep, at most
// kKC; K = 768: 2 x 384.
inline int KcStep(int K) {
  const int blocks = (K + kKC - 1) / kKC;
  const int per = (K + blocks - 1) / blocks;
  return (per + kKStep - 1) / kKStep * kKStep;
}
inline int RoundUp(int v, int to) { return (v + to - 1) / to * to; }

// The mc x kc block of A at (i0, k0) as mcp rows (mc rounded up to kMR) of kp bf16 (kc rounded
// up to kKStep), row-major, zeros past mc and kc. A stored (M,K): rows copied; stored transposed
// (K,M): packed in pairs (internal::Pack) into `t` (kp/2 x kMR words), then transposed 16 x 16
// words at a time (AVX-512 where the CPU has it, else scalar).
void PackA(const internal::View& A, int i0, int k0, int mc, int kc, int kp, uint16_t* dst,
           uint32_t* t);
// The kc x nc block of B at (k0, j0) as ceil(nc/32) panels of kp/2 pair rows x 32 words, zeros
// past kc and nc.
void PackB(const internal::View& B, int k0, int j0, int kc, int nc, int kp, uint32_t* dst);
// The word transpose PackA uses: dst[c * ld_dst + r] = src[r * ld_src + c] for r, c < 16.
void Transpose16x16(const uint32_t* src, std::ptrdiff_t ld_src, uint32_t* dst,
                    std::ptrdiff_t ld_dst);
void Transpose16x16Scalar(const uint32_t* src, std::ptrdiff_t ld_src, uint32_t* dst,
                          std::ptrdiff_t ld_dst);

// c (32 x 32 fp32, row stride ldc floats) (+)= a (32 rows of kp bf16, packed) @ b (kp/2 pair
// rows x 32 words, packed).
template <class Tiles>
void MicroKernel(Tiles& t, int kp, const uint16_t* a, const uint32_t* b, float* c, int ldc,
                 bool add) {
  const std::size_t lc = static_cast<std::size_t>(ldc) * sizeof(float);
  const std::size_t la = static_cast<std::size_t>(kp) * sizeof(uint16_t);
  constexpr std::size_t lb = kNR * sizeof(uint32_t);
  float* c1 = c + static_cast<std::ptrdiff_t>(16) * ldc;
  if (add) {
    t.template Load<0>(c, lc);
    t.template Load<1>(c + 16, lc);
    t.template Load<2>(c1, lc);
    t.template Load<3>(c1 + 16, lc);
  } else {
    t.template Zero<0>();
    t.template Zero<1>();
    t.template Zero<2>();
    t.template Zero<3>();
  }
  const uint16_t* a1 = a + static_cast<std::ptrdiff_t>(16) * kp;
  for (int k = 0; k < kp; k += kKStep) {
    const uint32_t* bk = b + static_cast<std::ptrdiff_t>(k / 2) * kNR;
    t.template Load<4>(a + k, la);
    t.template Load<5>(a1 + k, la);
    t.template Load<6>(bk, lb);
    t.template Load<7>(bk + 16, lb);
    t.template DotBf16<0, 4, 6>();
    t.template DotBf16<1, 4, 7>();
    t.template DotBf16<2, 5, 6>();
    t.template DotBf16<3, 5, 7>();
  }
  t.template Store<0>(c, lc);
  t.template Store<1>(c + 16, lc);
  t.template Store<2>(c1, lc);
  t.template Store<3>(c1 + 16, lc);
}

// One 32 x 32 block of C, m x n of it inside C: directly when whole, else through a buffer.
template <class Tiles>
void Block(Tiles& t, int kp, const uint16_t* a, const uint32_t* b, float* c, int ldc, int m, int n,
           bool add) {
  if (m == kMR && n == kNR) return MicroKernel(t, kp, a, b, c, ldc, add);
  alignas(64) float tile[kMR][kNR];
  for (int r = 0; r < kMR; ++r) {
    for (int j = 0; j < kNR; ++j) {
      tile[r][j] = add && r < m && j < n ? c[static_cast<std::ptrdiff_t>(r) * ldc + j] : 0.f;
    }
  }
  MicroKernel(t, kp, a, b, &tile[0][0], kNR, add);
  for (int r = 0; r < m; ++r)
    std::copy(tile[r], tile[r] + n, c + static_cast<std::ptrdiff_t>(r) * ldc);
}

// The GEMM on tiles `t`, which the caller has configured (UniformConfig(16, 64)).
template <class Tiles>
void Gemm(Tiles& t, AmxScratch& s, int M, int N, int K, const internal::View& a,
          const internal::View& b, float* C, int ldc, bool add) {
  const int kc_step = KcStep(K);
  for (int j0 = 0; j0 < N; j0 += kNC) {
    const int nc = std::min(kNC, N - j0);
    for (int k0 = 0; k0 < K; k0 += kc_step) {
      const int kc = std::min(kc_step, K - k0), kp = RoundUp(kc, kKStep);
      PackB(b, k0, j0, kc, nc, kp, s.b.data());
      for (int i0 = 0; i0 < M; i0 += kMC) {
        const int mc = std::min(kMC, M - i0);
        PackA(a, i0, k0, mc, kc, kp, s.a.data(), s.t.data());
        for (int jr = 0; jr < nc; jr += kNR) {
          const uint32_t* bp = s.b.data() + static_cast<std::size_t>(jr / kNR) * (kp / 2) * kNR;
          for (int ir = 0; ir < mc; ir += kMR) {
            Block(t, kp, s.a.data() + static_cast<std::size_t>(ir) * kp, bp,
                  C + static_cast<std::ptrdiff_t>(i0 + ir) * ldc + (j0 + jr), ldc,
                  std::min(kMR, mc - ir), std::min(kNR, nc - jr), add || k0 > 0);
          }
        }
      }
    }
  }
}

// ---- the two instantiations, and what running the real one needs

// On the real tiles (amx_real.cc): configures, runs Gemm, releases. Call only where Granted().
void RealGemm(int M, int N, int K, const uint16_t* A, bool ta, int lda, const uint16_t* B, bool tb,
              int ldb, float* C, int ldc, bool add);
// On the model (amx_gemm.cc): the same code, any CPU, slowly (a correctness backend).
void ModelGemm(int M, int N, int K, const uint16_t* A, bool ta, int lda, const uint16_t* B, bool tb,
               int ldb, float* C, int ldc, bool add);
// The AMX peak loop: `iters` rounds of 4 independent TDPBF16PS on resident tiles (each 16 x 16
// fp32 += 16 x 32 bf16 . 32 x 16 bf16: 16 * 16 * 32 * 2 = 16384 flops, kPeakLoopFlops a round);
// returns a value derived from the accumulators. Call only where Granted().
float RealPeakLoop(uint64_t iters);
inline constexpr double kPeakLoopFlops = 4.0 * 16 * 16 * 32 * 2;

// Test hook: CPUTRAIN_DISABLE_AMX=1 makes Granted() false ("forced off"), so the fallback from
// AMX is tested on a CPU that has it.
inline constexpr const char* kDisableAmxEnv = "CPUTRAIN_DISABLE_AMX";

// Whether this build has the real instructions (the compiler knew -mamx-tile -mamx-bf16).
bool Built();
// The process's AMX state, settled once: the CPU reports AMX-TILE and AMX-BF16, the OS enables
// tile state (XCR0 bits 17 and 18), and Linux granted this process tile data
// (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), asked once, on the first call). Granted()
// is true when all hold and a small product on the real tiles agreed with the model; else
// Refusal() says which step failed, in words.
bool Granted();
const std::string& Refusal();

}  // namespace cputrain::kernels::amx
