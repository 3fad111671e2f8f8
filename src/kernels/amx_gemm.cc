// The portable half of our AMX kernel (kernels/amx_gemm.h): the tile model, the packing, the
// model's instantiation of the GEMM, and what running the real tiles needs (CPUID, XCR0, Linux's
// permission, a self-check against the model). Built with -ffp-contract=off (CMakeLists.txt): the
// model's arithmetic is exactly the fmaf and additions written here.
#include "kernels/amx_gemm.h"

#include <cpuid.h>
#include <fmt/format.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>

#include "common/error.h"
#include "kernels/bf16.h"

namespace cputrain::kernels::amx {

TileConfig UniformConfig(int rows, int colsb) {
  TileConfig c;
  c.palette_id = 1;
  for (int t = 0; t < kTiles; ++t) {
    c.rows[t] = static_cast<uint8_t>(rows);
    c.colsb[t] = static_cast<uint16_t>(colsb);
  }
  return c;
}

// ---- the model

void TileModel::Configure(const TileConfig& cfg) {
  CPUTRAIN_CHECK(cfg.palette_id <= 1,
                 fmt::format("LDTILECFG: palette {} is not supported (#GP)", cfg.palette_id));
  std::memset(data_, 0, sizeof data_);
  if (cfg.palette_id == 0) {  // the init state, as TILERELEASE leaves it
    Release();
    return;
  }
  // start_row (where a faulting TILELOADD/TILESTORED resumes) is not modelled: it must be 0.
  CPUTRAIN_CHECK(cfg.start_row == 0, "LDTILECFG: start_row must be 0 in the model");
  for (uint8_t r : cfg.reserved0)
    CPUTRAIN_CHECK(r == 0, "LDTILECFG: reserved bytes must be 0 (#GP)");
  for (int t = 0; t < 16; ++t) {
    const int rows = cfg.rows[t], colsb = cfg.colsb[t];
    if (t >= kTiles) {
      CPUTRAIN_CHECK(rows == 0 && colsb == 0, "LDTILECFG: palette 1 has 8 tiles (#GP)");
      continue;
    }
    CPUTRAIN_CHECK(rows <= kMaxRows && colsb <= kRowBytes,
                   fmt::format("LDTILECFG: tile {} of {} rows x {} bytes exceeds 16 x 64 (#GP)", t,
                               rows, colsb));
    CPUTRAIN_CHECK((rows == 0) == (colsb == 0),
                   fmt::format("LDTILECFG: tile {} has rows or colsb zero but not both (#GP)", t));
  }
  cfg_ = cfg;
  configured_ = true;
}

void TileModel::Release() {
  cfg_ = TileConfig{};
  configured_ = false;
  std::memset(data_, 0, sizeof data_);
}

int TileModel::Rows(int t) const {
  CPUTRAIN_CHECK(configured_ && t >= 0 && t < kTiles && cfg_.rows[t] > 0,
                 fmt::format("tile {} used but not configured (#UD)", t));
  return cfg_.rows[t];
}

int TileModel::Colsb(int t) const {
  Rows(t);
  return cfg_.colsb[t];
}

void TileModel::Load(int t, const void* base, std::size_t stride) {
  const int rows = Rows(t), colsb = Colsb(t);
  const auto* p = static_cast<const uint8_t*>(base);
  for (int r = 0; r < kMaxRows; ++r) {
    uint8_t* row = data_[t][r];
    std::memset(row, 0, kRowBytes);  // write_row_and_zero; zero_upper_rows
    if (r < rows) std::memcpy(row, p + static_cast<std::size_t>(r) * stride, colsb);
  }
}

void TileModel::Zero(int t) {
  Rows(t);
  std::memset(data_[t], 0, sizeof data_[t]);
}

void TileModel::Store(int t, void* base, std::size_t stride) const {
  const int rows = Rows(t), colsb = Colsb(t);
  auto* p = static_cast<uint8_t*>(base);
  for (int r = 0; r < rows; ++r)
    std::memcpy(p + static_cast<std::size_t>(r) * stride, data_[t][r], colsb);
}

namespace {

// Denormals read as zero (DAZ) and written as zero (FTZ), keeping the sign.
float Flush(float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.f, x) : x; }
// make_fp32: a bf16's bits in the top half of an fp32.
float Bf16At(const uint8_t* row, int i) {
  uint16_t b;
  std::memcpy(&b, row + 2 * i, sizeof b);
  return Flush(Bf16ToFloat(b));
}

}  // namespace

void TileModel::DotBf16(int c, int a, int b) {
  const int M = Rows(c), N = Colsb(c) / 4, K = Colsb(a) / 4;
  CPUTRAIN_CHECK(
      Rows(a) == M && Rows(b) == K && Colsb(b) == Colsb(c) && Colsb(c) % 4 == 0 &&
          Colsb(a) % 4 == 0 && c != a && c != b && a != b,
      fmt::format("TDPBF16PS tmm{}, tmm{}, tmm{}: shapes {}x{}, {}x{}, {}x{} do not match (#UD)", c,
                  a, b, M, Colsb(c), Rows(a), Colsb(a), Rows(b), Colsb(b)));
  for (int m = 0; m < M; ++m) {
    float temp[2 * kRowBytes / 4] = {};  // per column n: [2n] even elements, [2n+1] odd
    for (int k = 0; k < K; ++k) {
      for (int n = 0; n < N; ++n) {
        temp[2 * n] =
            Flush(std::fmaf(Bf16At(data_[a][m], 2 * k), Bf16At(data_[b][k], 2 * n), temp[2 * n]));
        temp[2 * n + 1] = Flush(std::fmaf(Bf16At(data_[a][m], 2 * k + 1),
                                          Bf16At(data_[b][k], 2 * n + 1), temp[2 * n + 1]));
      }
    }
    uint8_t* row = data_[c][m];
    for (int n = 0; n < N; ++n) {
      float acc;
      std::memcpy(&acc, row + 4 * n, sizeof acc);
      const float sum = Flush(temp[2 * n] + temp[2 * n + 1]);
      acc = Flush(Flush(acc) + sum);
      std::memcpy(row + 4 * n, &acc, sizeof acc);
    }
    std::memset(row + 4 * N, 0, kRowBytes - 4 * N);  // write_row_and_zero
  }
  for (int m = M; m < kMaxRows; ++m) std::memset(data_[c][m], 0, kRowBytes);  // zero_upper_rows
}

// ---- packing

void Transpose16x16Scalar(const uint32_t* src, std::ptrdiff_t ld_src, uint32_t* dst,
                          std::ptrdiff_t ld_dst) {
  for (int r = 0; r < 16; ++r) {
    for (int c = 0; c < 16; ++c) dst[c * ld_dst + r] = src[r * ld_src + c];
  }
}

void Transpose16x16(const uint32_t* src, std::ptrdiff_t ld_src, uint32_t* dst,
                    std::ptrdiff_t ld_dst) {
  if (internal::PackVectorized()) {
    return internal::TransposeWords16(reinterpret_cast<const uint16_t*>(src), 2 * ld_src, 16, dst,
                                      ld_dst, 0xffff);
  }
  Transpose16x16Scalar(src, ld_src, dst, ld_dst);
}

void PackA(const internal::View& A, int i0, int k0, int mc, int kc, int kp, uint16_t* dst,
           uint32_t* t) {
  const int mcp = RoundUp(mc, kMR);
  if (!A.trans) {  // rows hold k contiguously: copied
    for (int r = 0; r < mcp; ++r) {
      uint16_t* d = dst + static_cast<std::ptrdiff_t>(r) * kp;
      int done = 0;
      if (r < mc) {
        const uint16_t* s = A.p + static_cast<std::ptrdiff_t>(i0 + r) * A.ld + k0;
        std::copy(s, s + kc, d);
        done = kc;
      }
      std::fill(d + done, d + kp, uint16_t{0});
    }
    return;
  }
  // Stored (K,M): kMR rows at a time in pairs (pair-major, kp/2 x kMR words in t), then
  // transposed into the rows' words (row stride kp/2 words).
  const int pairs = kp / 2, filled = (kc + 1) / 2;
  for (int r = 0; r < mcp; r += kMR) {
    internal::Pack(A, false, i0 + r, k0, std::min(kMR, mc - r), kc, kMR, t);
    std::fill(t + static_cast<std::ptrdiff_t>(filled) * kMR,
              t + static_cast<std::ptrdiff_t>(pairs) * kMR, 0u);
    auto* rows = reinterpret_cast<uint32_t*>(dst + static_cast<std::ptrdiff_t>(r) * kp);
    for (int p0 = 0; p0 < pairs; p0 += 16) {
      for (int r0 = 0; r0 < kMR; r0 += 16) {
        Transpose16x16(t + static_cast<std::ptrdiff_t>(p0) * kMR + r0, kMR,
                       rows + static_cast<std::ptrdiff_t>(r0) * pairs + p0, pairs);
      }
    }
  }
}

void PackB(const internal::View& B, int k0, int j0, int kc, int nc, int kp, uint32_t* dst) {
  const std::size_t panel = static_cast<std::size_t>(kp / 2) * kNR;
  const std::size_t filled = static_cast<std::size_t>((kc + 1) / 2) * kNR;
  for (int jp = 0; jp < nc; jp += kNR) {
    uint32_t* d = dst + static_cast<std::size_t>(jp / kNR) * panel;
    internal::Pack(B, true, j0 + jp, k0, std::min(kNR, nc - jp), kc, kNR, d);
    std::fill(d + filled, d + panel, 0u);
  }
}

void ModelGemm(int M, int N, int K, const uint16_t* A, bool ta, int lda, const uint16_t* B, bool tb,
               int ldb, float* C, int ldc, bool add) {
  thread_local AmxScratch scratch;
  thread_local TileModel tiles;
  tiles.Configure(UniformConfig(kMaxRows, kRowBytes));
  Gemm(tiles, scratch, M, N, K, {A, ta, lda}, {B, tb, ldb}, C, ldc, add);
  tiles.Release();
}

// ---- the real tiles' preconditions

namespace {

constexpr int kArchReqXcompPerm = 0x1023;  // arch_prctl option (Linux 5.16+, asm/prctl.h)
constexpr int kXfeatureXtiledata = 18;     // the XSAVE feature number of AMX tile data

// CPUID leaf 7 sub-leaf 0, EDX: bit 22 AMX-BF16, bit 24 AMX-TILE.
bool CpuHasAmx() {
  unsigned a, b, c, d;
  if (__get_cpuid_max(0, nullptr) < 7) return false;
  __cpuid_count(7, 0, a, b, c, d);
  return (d >> 22 & 1u) && (d >> 24 & 1u);
}

// XCR0 bits 17 (XTILECFG) and 18 (XTILEDATA): the OS saves and restores tile state.
bool OsEnablesTiles() {
  unsigned a, b, c, d;
  __cpuid(1, a, b, c, d);
  if (!(c >> 27 & 1u)) return false;  // OSXSAVE: XGETBV usable
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (lo >> 17 & 1u) && (lo >> 18 & 1u);
}

// The real tiles against the model on two small products with every edge (partial blocks, odd
// K, both transposes, accumulate): "" when they agree within fp32 reordering, else how not.
std::string SelfCheck() {
  const int M = 45, N = 37, K = 71;
  std::mt19937 rng(31);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<uint16_t> a(static_cast<std::size_t>(M) * K), b(static_cast<std::size_t>(K) * N);
  for (uint16_t& v : a) v = FloatToBf16(u(rng));
  for (uint16_t& v : b) v = FloatToBf16(u(rng));
  for (const bool trans : {false, true}) {
    std::vector<float> real(static_cast<std::size_t>(M) * N, 0.5f), model = real;
    // trans: A read as stored (K,M) and B as stored (N,K): the same buffers, other products.
    const int lda = trans ? M : K, ldb = trans ? K : N;
    RealGemm(M, N, K, a.data(), trans, lda, b.data(), trans, ldb, real.data(), N, true);
    ModelGemm(M, N, K, a.data(), trans, lda, b.data(), trans, ldb, model.data(), N, true);
    for (std::size_t i = 0; i < real.size(); ++i) {
      // |products| <= 1 each: K of them, fp32 reordering moves a sum by at most ~K ulp of K.
      if (!(std::fabs(real[i] - model[i]) <= 1e-4f)) {
        return "the real tiles disagreed with the tile model on a test product (element " +
               std::to_string(i) + ": " + std::to_string(real[i]) + " vs " +
               std::to_string(model[i]) + ")";
      }
    }
  }
  return "";
}

struct State {
  bool granted = false;
  std::string refusal;
};

const State& Settle() {
  static const State state = [] {
    State s;
    const char* off = std::getenv(kDisableAmxEnv);
    if (off != nullptr && std::strcmp(off, "1") == 0) {
      s.refusal = std::string("AMX forced off by ") + kDisableAmxEnv + "=1";
    } else if (!CpuHasAmx()) {
      s.refusal = "this CPU does not report AMX-TILE and AMX-BF16";
    } else if (!Built()) {
      s.refusal = "this build has no AMX instructions (its compiler lacked -mamx-tile -mamx-bf16)";
    } else if (!OsEnablesTiles()) {
      s.refusal = "the OS does not enable AMX tile state (XCR0 bits 17-18 clear)";
    } else if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) {
      s.refusal = std::string(
                      "Linux refused AMX tile data to this process (arch_prctl("
                      "ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA): ") +
                  std::strerror(errno) + "; Linux 5.16 or later grants it)";
    } else {
      s.refusal = SelfCheck();
    }
    s.granted = s.refusal.empty();
    return s;
  }();
  return state;
}

}  // namespace

bool Granted() { return Settle().granted; }
const std::string& Refusal() { return Settle().refusal; }

}  // namespace cputrain::kernels::amx
