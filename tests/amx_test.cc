// Our AMX kernel's pieces on every CPU (kernels/amx_tiles.h, amx_gemm.h):
//  - the tile model against a plain reference of the SDM's definitions: TILELOADD's zero fill
//    past the configured rows and bytes, TILESTORED writing only what is configured, TDPBF16PS on
//    full and partial shapes (pairs, accumulate-into, the even/odd partial sums, DAZ/FTZ), and
//    the #GP/#UD cases as errors;
//  - the packing (vector against scalar; A's rows and B's pair panels as the tiles read them) and
//    the 16 x 16 word transpose;
//  - where the CPU has AMX and Linux grants it, the real instructions against the model, tile by
//    tile and on whole GEMMs (elsewhere those tests are skipped, saying why);
//  - the kernel selection: what auto picks, a refused request as InputError, the environment
//    override, and the bf16-slower-than-fp32 note.
// The GEMM itself on the model, on every layout and edge, is in bf16_gemm_test.cc (tile_model).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/error.h"
#include "kernels/amx_gemm.h"
#include "kernels/amx_tiles.h"
#include "kernels/bf16.h"
#include "kernels/bf16_pack.h"
#include "kernels/peak.h"

namespace cputrain {
namespace {

using kernels::Bf16ToFloat;
using kernels::FloatToBf16;
namespace amx = kernels::amx;

std::vector<uint8_t> RandomBytes(std::size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (uint8_t& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// n bf16 of |x| <= 2 (normal or zero).
std::vector<uint16_t> RandomBf16(std::size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  std::vector<uint16_t> v(n);
  for (uint16_t& x : v) x = FloatToBf16(u(rng));
  return v;
}

amx::TileConfig Config(std::initializer_list<std::pair<int, int>> shapes) {
  amx::TileConfig c;
  c.palette_id = 1;
  int t = 0;
  for (auto [rows, colsb] : shapes) {
    c.rows[t] = static_cast<uint8_t>(rows);
    c.colsb[t] = static_cast<uint16_t>(colsb);
    ++t;
  }
  return c;
}

TEST(TileModel, LoadZeroFillsPastTheConfiguredRowsAndBytesAndStoreWritesOnlyThem) {
  amx::TileModel t;
  t.Configure(Config({{5, 36}, {16, 64}}));
  const std::size_t stride = 100;
  const std::vector<uint8_t> mem = RandomBytes(stride * 16, 1);
  t.Load(1, mem.data(), stride);  // fill tile 1 entirely first: Load(0) must not touch it
  t.Load(0, mem.data() + 3, stride);
  for (int r = 0; r < amx::kMaxRows; ++r) {
    for (int b = 0; b < amx::kRowBytes; ++b) {
      const uint8_t want = r < 5 && b < 36 ? mem[3 + r * stride + b] : 0;
      ASSERT_EQ(t.row(0, r)[b], want) << "row " << r << " byte " << b;
      ASSERT_EQ(t.row(1, r)[b], mem[r * stride + b]);
    }
  }
  std::vector<uint8_t> out(stride * 16, 0xee);
  t.Store(0, out.data() + 1, stride);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const std::size_t r = (i - 1) / stride, b = (i - 1) % stride;
    const bool inside = i >= 1 && r < 5 && b < 36;
    ASSERT_EQ(out[i], inside ? mem[3 + r * stride + b] : 0xee) << i;
  }
  t.Zero(1);
  for (int r = 0; r < amx::kMaxRows; ++r) ASSERT_EQ(t.row(1, r)[63], 0);
}

// TDPBF16PS by its definition, in double where the result is exact and with the model's fp32
// steps where it is not: the reference here keeps the two partial sums as the SDM does, so the
// model must agree to the bit.
std::vector<float> ReferenceDot(const std::vector<float>& c0, const std::vector<uint16_t>& a,
                                const std::vector<uint16_t>& b, int M, int N, int K) {
  std::vector<float> c = c0;
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < N; ++n) {
      float even = 0, odd = 0;
      for (int k = 0; k < K; ++k) {
        even =
            std::fmaf(Bf16ToFloat(a[m * 2 * K + 2 * k]), Bf16ToFloat(b[k * 2 * N + 2 * n]), even);
        odd = std::fmaf(Bf16ToFloat(a[m * 2 * K + 2 * k + 1]),
                        Bf16ToFloat(b[k * 2 * N + 2 * n + 1]), odd);
      }
      c[m * N + n] += even + odd;
    }
  }
  return c;
}

TEST(TileModel, DotBf16OnFullAndPartialShapesIsTheSdmDefinition) {
  for (auto [M, N, K] : {std::tuple{16, 16, 16}, std::tuple{3, 5, 7}, std::tuple{16, 1, 1},
                         std::tuple{1, 16, 16}, std::tuple{9, 12, 2}}) {
    amx::TileModel t;
    // tmm0: C (M x N fp32), tmm1: A (M rows x K pairs), tmm2: B (K pair rows x N pairs)
    t.Configure(Config({{M, 4 * N}, {M, 4 * K}, {K, 4 * N}}));
    const std::vector<uint16_t> a = RandomBf16(static_cast<std::size_t>(M) * 2 * K, 2),
                                b = RandomBf16(static_cast<std::size_t>(K) * 2 * N, 3);
    std::vector<float> c0(static_cast<std::size_t>(M) * N);
    for (std::size_t i = 0; i < c0.size(); ++i) c0[i] = 0.125f * static_cast<float>(i % 9);
    t.Load(0, c0.data(), 4 * N);
    t.Load(1, a.data(), 4 * K);
    t.Load(2, b.data(), 4 * N);
    t.DotBf16(0, 1, 2);
    t.DotBf16(0, 1, 2);  // accumulates again into what the first wrote
    std::vector<float> got(c0.size());
    t.Store(0, got.data(), 4 * N);
    const std::vector<float> want = ReferenceDot(ReferenceDot(c0, a, b, M, N, K), a, b, M, N, K);
    for (std::size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i], want[i]) << M << "x" << N << "x" << K << " at " << i;
    }
    for (int r = M; r < amx::kMaxRows; ++r) ASSERT_EQ(t.row(0, r)[0], 0) << "zero_upper_rows";
  }
}

TEST(TileModel, DotBf16TreatsDenormalsAsZero) {
  amx::TileModel t;
  t.Configure(Config({{1, 4}, {1, 4}, {1, 4}}));
  // A pair (denormal, 1), B pair (1, denormal): every product has a denormal factor.
  const uint16_t a[2] = {0x0001, 0x3f80}, b[2] = {0x3f80, 0x0001};
  const float c0 = 1e-40f;  // a denormal accumulator reads as zero too
  t.Load(0, &c0, 4);
  t.Load(1, a, 4);
  t.Load(2, b, 4);
  t.DotBf16(0, 1, 2);
  float c;
  t.Store(0, &c, 4);
  EXPECT_EQ(c, 0.f);
  EXPECT_FALSE(std::signbit(c));
}

TEST(TileModel, ShapeMismatchesAndBadConfigsAreErrors) {
  amx::TileModel t;
  const uint16_t mem[512] = {};
  EXPECT_THROW(t.Load(0, mem, 64), RuntimeError);  // not configured: #UD
  EXPECT_THROW(t.Configure(Config({{17, 64}})), RuntimeError);
  EXPECT_THROW(t.Configure(Config({{16, 65}})), RuntimeError);
  EXPECT_THROW(t.Configure(Config({{0, 64}})), RuntimeError);
  amx::TileConfig palette2 = Config({{16, 64}});
  palette2.palette_id = 2;
  EXPECT_THROW(t.Configure(palette2), RuntimeError);
  t.Configure(Config({{4, 16}, {4, 8}, {3, 16}}));  // A has 2 pairs, B 3 rows: #UD
  EXPECT_THROW(t.DotBf16(0, 1, 2), RuntimeError);
  EXPECT_THROW(t.DotBf16(0, 0, 2), RuntimeError);  // a tile twice
  t.Configure(amx::TileConfig{});                  // palette 0: released
  EXPECT_FALSE(t.configured());
}

TEST(AmxPacking, VectorPackingEqualsScalarOnEveryLayout) {
  if (!kernels::internal::PackVectorized()) GTEST_SKIP() << "no AVX-512 here: scalar packing only";
  const std::vector<uint16_t> m = RandomBf16(90 * 90, 4);
  for (bool trans : {false, true}) {
    for (bool by_column : {false, true}) {
      for (auto [rows, kc, width] : {std::tuple{12, 7, 12}, std::tuple{32, 64, 32},
                                     std::tuple{5, 33, 32}, std::tuple{17, 1, 32}}) {
        const kernels::internal::View v{m.data(), trans, 90};
        std::vector<uint32_t> a(static_cast<std::size_t>((kc + 1) / 2) * width, 7), b(a.size(), 9);
        kernels::internal::Pack(v, by_column, 3, 5, rows, kc, width, a.data());
        kernels::internal::PackScalar(v, by_column, 3, 5, rows, kc, width, b.data());
        ASSERT_EQ(a, b) << trans << by_column << " " << rows << "x" << kc << "/" << width;
      }
    }
  }
}

TEST(AmxPacking, TransposeIsExactAndTheVectorOneEqualsTheScalarOne) {
  std::vector<uint32_t> src(20 * 16), a(16 * 24, 0), b(16 * 24, 0);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint32_t>(i * 2654435761u);
  amx::Transpose16x16(src.data(), 20, a.data(), 24);
  amx::Transpose16x16Scalar(src.data(), 20, b.data(), 24);
  EXPECT_EQ(a, b);
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) ASSERT_EQ(b[c * 24 + r], src[r * 20 + c]);
}

// PackA's rows are A's rows with k contiguous, zero past mc and kc, whichever way A is stored;
// PackB's panels hold (b[2p][j], b[2p+1][j]) words of 32 columns, zero past kc and nc.
TEST(AmxPacking, PanelsAreWhatTheTilesRead) {
  const int M = 50, K = 45, mc = 37, kc = 39, kp = 64;
  const std::vector<uint16_t> m = RandomBf16(static_cast<std::size_t>(M) * K, 5);
  for (bool trans : {false, true}) {
    // The same matrix X (M x K) either way: stored (M,K), or its transpose stored (K,M).
    std::vector<uint16_t> stored(m.size());
    for (int i = 0; i < M; ++i)
      for (int k = 0; k < K; ++k) stored[trans ? k * M + i : i * K + k] = m[i * K + k];
    const kernels::internal::View v{stored.data(), trans, trans ? M : K};
    std::vector<uint16_t> a(static_cast<std::size_t>(64) * kp, 0xffff);
    std::vector<uint32_t> tmp(static_cast<std::size_t>(kp / 2) * amx::kMR);
    amx::PackA(v, 2, 3, mc, kc, kp, a.data(), tmp.data());
    for (int r = 0; r < 64; ++r) {
      for (int k = 0; k < kp; ++k) {
        const uint16_t want = r < mc && k < kc ? m[(2 + r) * K + 3 + k] : 0;
        ASSERT_EQ(a[r * kp + k], want) << "A trans=" << trans << " at " << r << "," << k;
      }
    }
    // X as B (K x N = the transpose's reading): column j of B is X's row j.
    const kernels::internal::View bv{stored.data(), !trans, trans ? M : K};
    const int nc = 33;
    std::vector<uint32_t> b(static_cast<std::size_t>(2) * (kp / 2) * amx::kNR, 0xdeadbeef);
    amx::PackB(bv, 3, 2, kc, nc, kp, b.data());
    for (int panel = 0; panel < 2; ++panel) {
      for (int p = 0; p < kp / 2; ++p) {
        for (int c = 0; c < amx::kNR; ++c) {
          const int j = panel * amx::kNR + c, k = 2 * p;
          const uint32_t lo = j < nc && k < kc ? m[(2 + j) * K + 3 + k] : 0;
          const uint32_t hi = j < nc && k + 1 < kc ? m[(2 + j) * K + 3 + k + 1] : 0;
          ASSERT_EQ(b[(panel * (kp / 2) + p) * amx::kNR + c], lo | hi << 16)
              << "B trans=" << trans << " panel " << panel << " pair " << p << " col " << c;
        }
      }
    }
  }
}

TEST(AmxPacking, KBlocksAreMultiplesOfATileStep) {
  EXPECT_EQ(amx::KcStep(1), 32);
  EXPECT_EQ(amx::KcStep(64), 64);
  EXPECT_EQ(amx::KcStep(768), 384);
  EXPECT_EQ(amx::KcStep(3072), 512);
  EXPECT_EQ(amx::KcStep(513), 288);  // 2 blocks of 257, rounded up to 288
}

// ---- the real instructions against the model (AMX CPUs only)

TEST(AmxReal, OneBlockMatchesTheModel) {
  if (!amx::Granted()) GTEST_SKIP() << "needs AMX: " << amx::Refusal();
  // One 32 x 32 block, one tile step, accumulating: every instruction once. Within fp32
  // reordering of 32 terms; how many of the 1024 agree to the bit is recorded (the SDM's two
  // wordings of TDPBF16PS order the additions differently: amx_tiles.h).
  const std::vector<uint16_t> a = RandomBf16(32 * 32, 6), b = RandomBf16(32 * 32, 7);
  std::vector<float> real(32 * 32, 0.25f), model = real;
  amx::RealGemm(32, 32, 32, a.data(), false, 32, b.data(), false, 32, real.data(), 32, true);
  amx::ModelGemm(32, 32, 32, a.data(), false, 32, b.data(), false, 32, model.data(), 32, true);
  int exact = 0;
  for (std::size_t i = 0; i < real.size(); ++i) {
    ASSERT_NEAR(real[i], model[i], 1e-5f * 64) << i;
    exact += real[i] == model[i];
  }
  RecordProperty("exact_of_1024", exact);
}

TEST(AmxReal, GemmMatchesTheModelOnEveryLayoutAndEdge) {
  if (!amx::Granted()) GTEST_SKIP() << "needs AMX: " << amx::Refusal();
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (auto [M, N, K] : {std::tuple{1, 1, 1}, std::tuple{33, 65, 97}, std::tuple{130, 40, 800},
                             std::tuple{24, 4100, 3}}) {
        const int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 7;
        const std::vector<uint16_t> A = RandomBf16(static_cast<std::size_t>(ta ? K : M) * lda, 8);
        const std::vector<uint16_t> B = RandomBf16(static_cast<std::size_t>(tb ? N : K) * ldb, 9);
        std::vector<float> real(static_cast<std::size_t>(M) * ldc, 0.5f), model = real;
        amx::RealGemm(M, N, K, A.data(), ta, lda, B.data(), tb, ldb, real.data(), ldc, true);
        amx::ModelGemm(M, N, K, A.data(), ta, lda, B.data(), tb, ldb, model.data(), ldc, true);
        for (std::size_t i = 0; i < real.size(); ++i) {
          // |products| <= 4: fp32 reordering moves a sum of K of them by ~K ulp of 4K.
          ASSERT_NEAR(real[i], model[i], 4e-7 * 4 * K * (K + 1)) << M << "x" << N << "x" << K;
        }
      }
    }
  }
}

TEST(AmxReal, PeakLoopRuns) {
  if (!amx::Granted()) GTEST_SKIP() << "needs AMX: " << amx::Refusal();
  EXPECT_GT(kernels::MeasurePeakLoop(kernels::PeakLoop::kAmx, 0.01, 1), 0);
}

// ---- selection

// RAII: an environment variable set (or unset) for a scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = getenv(name)) old_ = old, had_ = true;
    value ? setenv(name, value, 1) : unsetenv(name);
  }
  ~ScopedEnv() { had_ ? setenv(name_, old_.c_str(), 1) : unsetenv(name_); }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

// auto's table (bf16_kernel.cc): our kernel on AMX, else on VDPBF16PS; nothing where neither runs.
TEST(Bf16Selection, AutoPicksAmxElseVdpbf16psAndSaysWhyAmxIsNotUsed) {
  ScopedEnv env(kernels::kBf16KernelEnv, nullptr);
  const kernels::Bf16Support s = kernels::DetectBf16();
  const kernels::Bf16Kernel best = kernels::BestBf16Kernel();
  if (amx::Granted()) {
    EXPECT_EQ(best, kernels::Bf16Kernel::kAmx);
  } else if (s.avx512_bf16) {
    EXPECT_EQ(best, kernels::Bf16Kernel::kVdpbf16ps);
    EXPECT_FALSE(amx::Refusal().empty());
    EXPECT_NE(kernels::Bf16KernelMissing(kernels::Bf16Kernel::kAmx).find("AMX"), std::string::npos);
  } else {
    EXPECT_EQ(best, kernels::Bf16Kernel::kAuto);
  }
  if (best != kernels::Bf16Kernel::kAuto) {
    EXPECT_EQ(kernels::UseBf16Kernel(kernels::Bf16Kernel::kAuto), best);
    EXPECT_EQ(kernels::ActiveBf16Kernel(kernels::GemmClass::kFwd), best);
  }
  // The tile model runs everywhere; a forced AMX where it is refused is an InputError naming why.
  EXPECT_EQ(kernels::UseBf16Kernel(kernels::Bf16Kernel::kTileModel),
            kernels::Bf16Kernel::kTileModel);
  EXPECT_EQ(kernels::Bf16RowBlock(kernels::GemmClass::kAttnFwd), 64);
  if (!amx::Granted()) {
    try {
      kernels::UseBf16Kernel(kernels::Bf16Kernel::kAmx);
      FAIL() << "amx accepted where it is refused";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("train.bf16_kernel is amx"), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find(amx::Refusal()), std::string::npos) << e.what();
    }
  }
}

TEST(Bf16Selection, TheEnvironmentOverridesAutoAndIsChecked) {
  {
    ScopedEnv env(kernels::kBf16KernelEnv, "tile-model");
    EXPECT_EQ(kernels::UseBf16Kernel(kernels::Bf16Kernel::kAuto), kernels::Bf16Kernel::kTileModel);
  }
  {
    ScopedEnv env(kernels::kBf16KernelEnv, "tiles");
    EXPECT_THROW(kernels::UseBf16Kernel(kernels::Bf16Kernel::kAuto), InputError);
  }
  EXPECT_EQ(kernels::ParseBf16Kernel("vdpbf16ps"), kernels::Bf16Kernel::kVdpbf16ps);
  EXPECT_FALSE(kernels::ParseBf16Kernel("VDPBF16PS").has_value());
}

TEST(Bf16Selection, ForcedOffHookLeavesOnlyTheModel) {
  ScopedEnv off(kernels::kDisableBf16Env, "1");
  ScopedEnv env(kernels::kBf16KernelEnv, nullptr);
  EXPECT_EQ(kernels::BestBf16Kernel(), kernels::Bf16Kernel::kAuto);
  try {
    kernels::UseBf16Kernel(kernels::Bf16Kernel::kAuto);
    FAIL() << "auto found a kernel with bf16 forced off";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("train.precision is bf16 but this CPU lacks AVX512_BF16"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(kernels::UseBf16Kernel(kernels::Bf16Kernel::kTileModel),
            kernels::Bf16Kernel::kTileModel);
}

TEST(Bf16Selection, SlowerNoteOnlyWhereVdpbf16psLosesToFp32) {
  using kernels::Bf16Kernel;
  // The Xeon: VDPBF16PS 123 GFLOP/s per core, fp32 FMA 246.
  const std::string note = kernels::Bf16SlowerNote(Bf16Kernel::kVdpbf16ps, 123, 246);
  EXPECT_NE(note.find("123 GFLOP/s per core against 246"), std::string::npos) << note;
  EXPECT_NE(note.find("train.precision: fp32"), std::string::npos) << note;
  EXPECT_EQ(kernels::Bf16SlowerNote(Bf16Kernel::kVdpbf16ps, 540, 270), "");  // Zen 5
  EXPECT_EQ(kernels::Bf16SlowerNote(Bf16Kernel::kAmx, 123, 246), "");
  // Measured here: whatever the rates, the note says so only when bf16 is the slower.
  const double bf16 = kernels::MeasurePeakLoop(kernels::PeakLoop::kVdpbf16ps, 0.01, 1);
  const double fp32 = kernels::MeasurePeakLoop(kernels::PeakLoop::kFma256, 0.01, 1);
  EXPECT_GT(fp32, 0);
  if (bf16 > 0) {
    EXPECT_EQ(kernels::Bf16SlowerNote(Bf16Kernel::kVdpbf16ps, bf16, fp32).empty(), bf16 >= fp32);
  }
}

}  // namespace
}  // namespace cputrain
