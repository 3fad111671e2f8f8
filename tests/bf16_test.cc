// BF16 support below the model: the fp32 -> bf16 rounding (ties to even, as PyTorch rounds),
// the run-time detection and its test hook, llm.c's bf16 (version 5) checkpoints loading as
// fp32 master weights, and grouped-query attention with bf16 products.
#include "kernels/bf16.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <vector>

#include "common/error.h"
#include "kernels/kernels.h"
#include "model/checkpoint.h"
#include "runtime/worker_pool.h"
#include "test_util.h"

namespace cputrain {
namespace {

using kernels::Bf16ToFloat;
using kernels::FloatToBf16;

float Bits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// The nearest bf16 by distance, computed in double independently of the bit trick: of the two
// bf16 values around x (truncation and the next one up in magnitude), the closer; on a tie the
// one with an even last mantissa bit.
uint16_t ReferenceRound(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  const uint16_t lo = static_cast<uint16_t>(u >> 16), hi = static_cast<uint16_t>(lo + 1);
  const double dlo = std::fabs(static_cast<double>(x) - Bf16ToFloat(lo));
  const double dhi =
      std::isinf(Bf16ToFloat(hi)) && !std::isinf(x)
          // rounding up past the largest finite bf16: IEEE's overflow rule, the
          // value halfway to 2^128 is the boundary
          ? std::fabs(static_cast<double>(x) - std::ldexp(1.0, 128) * (std::signbit(x) ? -1 : 1))
          : std::fabs(static_cast<double>(x) - Bf16ToFloat(hi));
  if (dlo != dhi) return dlo < dhi ? lo : hi;
  return (lo & 1) == 0 ? lo : hi;
}

TEST(Bf16Round, KnownValues) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBf16(-2.0f), 0xc000);
  EXPECT_EQ(FloatToBf16(0.0f), 0x0000);
  EXPECT_EQ(FloatToBf16(-0.0f), 0x8000);
  // Ties go to the even mantissa: 1 + 2^-8 is halfway between 1 and 1 + 2^-7.
  EXPECT_EQ(FloatToBf16(Bits(0x3f808000)), 0x3f80);
  EXPECT_EQ(FloatToBf16(Bits(0x3f818000)), 0x3f82);
  EXPECT_EQ(FloatToBf16(Bits(0x3f808001)), 0x3f81);  // just above the tie: up
  EXPECT_EQ(FloatToBf16(Bits(0x3f807fff)), 0x3f80);  // just below: down
  // Infinities keep their sign; the largest float is above the largest bf16's halfway point.
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(FloatToBf16(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::max()), 0x7f80);
  // NaNs (quiet, signalling, negative) become PyTorch's one quiet NaN.
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::quiet_NaN()), 0x7fc0);
  EXPECT_EQ(FloatToBf16(Bits(0x7f800001)), 0x7fc0);  // would round to inf if not caught
  EXPECT_EQ(FloatToBf16(Bits(0xffffffff)), 0x7fc0);
  // Subnormals round like other values (no flush to zero).
  EXPECT_EQ(FloatToBf16(Bits(0x00018000)), 0x0002);
  EXPECT_EQ(FloatToBf16(Bits(0x00008000)), 0x0000);
  EXPECT_EQ(FloatToBf16(Bits(0x00008001)), 0x0001);
}

TEST(Bf16Round, MatchesNearestEvenOnRandomBitPatterns) {
  std::mt19937 rng(1234);
  int checked = 0;
  for (int i = 0; i < 2000000; ++i) {
    const float x = Bits(static_cast<uint32_t>(rng()));
    if (std::isnan(x)) continue;
    ASSERT_EQ(FloatToBf16(x), ReferenceRound(x)) << std::hexfloat << x;
    ++checked;
  }
  EXPECT_GT(checked, 1900000);
}

TEST(Bf16Round, WideningIsExactAndRoundTrips) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float x = Bf16ToFloat(static_cast<uint16_t>(b));
    if (std::isnan(x)) continue;
    ASSERT_EQ(FloatToBf16(x), b);  // every bf16 is an fp32 that rounds to itself
  }
}

TEST(Bf16Round, PoolConversionEqualsScalar) {
  WorkerPool pool(std::vector<int>(3, 0), nullptr, "bf16");
  std::vector<float> src(10007);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 3.f);
  for (float& v : src) v = nd(rng);
  std::vector<uint16_t> dst(src.size(), 0xdead);
  kernels::ConvertToBf16(pool, dst.data(), src.data(), src.size());
  for (std::size_t i = 0; i < src.size(); ++i) ASSERT_EQ(dst[i], FloatToBf16(src[i])) << i;
}

TEST(Bf16Detect, HookForcesTheCapabilityOff) {
  ASSERT_EQ(unsetenv(kernels::kDisableBf16Env), 0);
  const kernels::Bf16Support on = kernels::DetectBf16();
  // What the compiler's own cpu model says (GCC 12 knows avx512bf16): the same answer.
  __builtin_cpu_init();
  EXPECT_EQ(on.avx512_bf16, __builtin_cpu_supports("avx512bf16") != 0);
  EXPECT_EQ(on.native(), on.avx512_bf16 || on.amx_bf16);
  EXPECT_EQ(on.trains(), on.avx512_bf16);
  EXPECT_EQ(on.Missing().empty(), on.native());
  ASSERT_EQ(setenv(kernels::kDisableBf16Env, "1", 1), 0);
  const kernels::Bf16Support off = kernels::DetectBf16();
  ASSERT_EQ(unsetenv(kernels::kDisableBf16Env), 0);
  EXPECT_FALSE(off.native());
  EXPECT_FALSE(off.trains());
  EXPECT_NE(off.Missing().find("AVX512_BF16"), std::string::npos) << off.Missing();
  EXPECT_NE(off.Missing().find(kernels::kDisableBf16Env), std::string::npos) << off.Missing();
  EXPECT_NE(off.Describe().find("not native"), std::string::npos) << off.Describe();
}

std::string Fixture(const std::string& f) {
  return std::string(CPUTRAIN_SOURCE_DIR) + "/tests/reference/fixtures/odd/" + f;
}

// llm.c's version 5 of a version 3 file: same header but the version, every parameter rounded.
std::string ToVersion5(const std::string& v3) {
  std::string v5 = v3.substr(0, 1024);
  const int32_t version = model::kCheckpointVersionBf16;
  std::memcpy(v5.data() + 4, &version, sizeof version);
  for (std::size_t off = 1024; off + 4 <= v3.size(); off += 4) {
    float x;
    std::memcpy(&x, v3.data() + off, sizeof x);
    const uint16_t b = FloatToBf16(x);
    v5.append(reinterpret_cast<const char*>(&b), sizeof b);
  }
  return v5;
}

TEST(Bf16Checkpoint, Version5LoadsAsTheRoundedFp32Weights) {
  test::TempDir dir;
  const std::string v3 = test::Slurp(Fixture("model.bin"));
  ASSERT_GT(v3.size(), 1024u);
  const std::string path = dir.path() + "/v5.bin";
  std::ofstream(path, std::ios::binary) << ToVersion5(v3);

  const model::Shape shape = model::ReadCheckpointShape(path);
  EXPECT_EQ(shape, model::ReadCheckpointShape(Fixture("model.bin")));
  model::ParamLayout layout(shape);
  std::vector<float> from3(layout.total()), from5(layout.total(), -7.f);
  model::LoadCheckpoint(Fixture("model.bin"), layout, from3.data());
  model::LoadCheckpoint(path, layout, from5.data());
  std::size_t differ = 0;
  for (std::size_t i = 0; i < from3.size(); ++i) {
    ASSERT_EQ(from5[i], Bf16ToFloat(FloatToBf16(from3[i]))) << i;
    differ += from5[i] != from3[i];
  }
  EXPECT_GT(differ, from3.size() / 2) << "the fixture's weights should not all be bf16 already";
  // What we write is still version 3 fp32.
  const std::string saved = dir.path() + "/saved.bin";
  model::SaveCheckpoint(saved, layout, from5.data());
  int32_t h[2];
  std::memcpy(h, test::Slurp(saved).data(), sizeof h);
  EXPECT_EQ(h[1], model::kCheckpointVersion);
}

TEST(Bf16Checkpoint, Version5WithTheWrongSizeIsRefused) {
  test::TempDir dir;
  const std::string v3 = test::Slurp(Fixture("model.bin"));
  const std::string v5 = ToVersion5(v3);
  const std::string cut = dir.path() + "/cut.bin", fp32_body = dir.path() + "/fp32.bin";
  std::ofstream(cut, std::ios::binary) << v5.substr(0, v5.size() - 2);
  std::ofstream(fp32_body, std::ios::binary) << v5.substr(0, 1024) + v3.substr(1024);
  for (const auto& [path, needle] :
       {std::pair{cut, "truncated"}, std::pair{fp32_body, "trailing data"}}) {
    try {
      (void)model::ReadCheckpointShape(path);
      ADD_FAILURE() << path << " was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(e.hint().find(needle), std::string::npos) << e.what() << " / " << e.hint();
    }
  }
}

// Grouped-query attention with bf16 products. A key/value head shared by NH/NKV query heads
// acts as that head repeated for each of them (transformers' repeat_kv) in multi-head attention,
// whose bf16 kernel tests/bf16_gemm_test.cc checks against a double-precision reference of the
// rounded operands. So the grouped kernel must give the multi-head kernel's results on the
// repeated heads, within that test's tolerances (out, att, dv 1e-5; dq, dk 1e-3 of their largest
// magnitude), a group's dk and dv being the sums of its query heads' parts. Against the fp32
// kernel on the same bf16-rounded operands, only the kernel's own rounding of P and dS to bf16
// (2^-9 of each term) separates them: 1e-2 of the largest magnitude (measured: 2e-3).
struct AttentionRun {
  std::vector<float> out, att, dqkv;
};
AttentionRun RunAttention(bool bf16, int threads, const std::vector<float>& qkv,
                          const std::vector<float>& dout, int B, int T, int C, int NH, int NKV,
                          const kernels::AttentionOptions& opt = {}) {
  WorkerPool pool(std::vector<int>(threads, 0), nullptr, "attn");
  AttentionRun r{std::vector<float>(dout.size()), std::vector<float>(std::size_t(B) * NH * T * T),
                 std::vector<float>(qkv.size(), -99.f)};
  std::vector<float> scratch(kernels::AttentionScratchFloats(threads, T));
  if (!bf16) {
    kernels::AttentionForward(pool, r.out.data(), r.att.data(), qkv.data(), B, T, C, NH, NKV, opt);
    kernels::AttentionBackward(pool, r.dqkv.data(), scratch.data(), dout.data(), qkv.data(),
                               r.att.data(), B, T, C, NH, NKV, opt);
    return r;
  }
  std::vector<uint16_t> qkv_b(qkv.size()), dout_b(dout.size()),
      sb(kernels::AttentionScratchBf16(threads, T));
  kernels::AttentionForwardBf16(pool, r.out.data(), r.att.data(), qkv.data(), qkv_b.data(),
                                sb.data(), B, T, C, NH, NKV, opt);
  kernels::AttentionBackwardBf16(pool, r.dqkv.data(), scratch.data(), sb.data(), qkv_b.data(),
                                 dout_b.data(), dout.data(), qkv.data(), r.att.data(), B, T, C, NH,
                                 NKV, opt);
  return r;
}

float MaxAbs(const std::vector<float>& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

TEST(AttentionBf16, GroupedQueryIsMultiHeadOnRepeatedHeads) {
  if (!kernels::DetectBf16().avx512_bf16) GTEST_SKIP() << kernels::DetectBf16().Describe();
  kernels::InitBlas();
  const int B = 2, T = 150, NH = 4, hs = 16, C = NH * hs;  // T crosses the 72-row blocks
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> dout(std::size_t(B) * T * C);
  for (float& x : dout) x = 0.05f * u(rng);
  for (int NKV : {2, 1}) {
    SCOPED_TRACE("NKV " + std::to_string(NKV));
    const int R = (NH + 2 * NKV) * hs, group = NH / NKV;
    std::vector<float> qkv(std::size_t(B) * T * R), mha(std::size_t(B) * T * 3 * C);
    for (float& x : qkv) x = 0.4f * u(rng);
    // mha: the same query heads, key/value head h / group repeated as head h
    for (std::size_t row = 0; row < std::size_t(B) * T; ++row) {
      const float* src = &qkv[row * R];
      float* dst = &mha[row * 3 * C];
      std::copy(src, src + C, dst);
      for (int h = 0; h < NH; ++h) {
        const int g = h / group;
        std::copy(src + (NH + g) * hs, src + (NH + g + 1) * hs, dst + C + h * hs);
        std::copy(src + (NH + NKV + g) * hs, src + (NH + NKV + g + 1) * hs, dst + 2 * C + h * hs);
      }
    }
    const AttentionRun gqa = RunAttention(true, 3, qkv, dout, B, T, C, NH, NKV);
    const AttentionRun mh = RunAttention(true, 3, mha, dout, B, T, C, NH, 0);
    for (std::size_t i = 0; i < gqa.out.size(); ++i) ASSERT_NEAR(gqa.out[i], mh.out[i], 1e-5) << i;
    for (std::size_t i = 0; i < gqa.att.size(); ++i) ASSERT_NEAR(gqa.att[i], mh.att[i], 1e-5) << i;
    const float tol_dq = 1e-3f * MaxAbs(mh.dqkv);  // dq, dk (dv is smaller: the bound is loose)
    for (std::size_t row = 0; row < std::size_t(B) * T; ++row) {
      const float* g = &gqa.dqkv[row * R];
      const float* m = &mh.dqkv[row * 3 * C];
      for (int c = 0; c < C; ++c) ASSERT_NEAR(g[c], m[c], tol_dq) << "dq " << row << "," << c;
      for (int kv = 0; kv < NKV; ++kv) {
        for (int d = 0; d < hs; ++d) {
          double dk = 0, dv = 0;
          for (int h = kv * group; h < (kv + 1) * group; ++h) {
            dk += m[C + h * hs + d];
            dv += m[2 * C + h * hs + d];
          }
          ASSERT_NEAR(g[(NH + kv) * hs + d], dk, tol_dq) << "dk " << row << "," << kv << "," << d;
          ASSERT_NEAR(g[(NH + NKV + kv) * hs + d], dv, 1e-5) << "dv " << row << "," << kv;
        }
      }
    }
    // The fp32 kernel on the rounded operands: the same q k^T, so the same probabilities.
    std::vector<float> qkv_r(qkv), dout_r(dout);
    for (float& x : qkv_r) x = Bf16ToFloat(FloatToBf16(x));
    for (float& x : dout_r) x = Bf16ToFloat(FloatToBf16(x));
    const AttentionRun f32 = RunAttention(false, 3, qkv_r, dout_r, B, T, C, NH, NKV);
    for (std::size_t i = 0; i < gqa.att.size(); ++i) ASSERT_NEAR(gqa.att[i], f32.att[i], 1e-5) << i;
    const float tol_out = 1e-2f * MaxAbs(f32.out), tol_d = 1e-2f * MaxAbs(f32.dqkv);
    for (std::size_t i = 0; i < gqa.out.size(); ++i)
      ASSERT_NEAR(gqa.out[i], f32.out[i], tol_out) << "fp32 out " << i;
    for (std::size_t i = 0; i < gqa.dqkv.size(); ++i)
      ASSERT_NEAR(gqa.dqkv[i], f32.dqkv[i], tol_d) << "fp32 dqkv " << i;
    // One task runs on one worker: any pool size gives the same bits.
    const AttentionRun one = RunAttention(true, 1, qkv, dout, B, T, C, NH, NKV);
    EXPECT_EQ(one.out, gqa.out);
    EXPECT_EQ(one.att, gqa.att);
    EXPECT_EQ(one.dqkv, gqa.dqkv);
  }
}

// BERT's attention with bf16 products: bidirectional over each row's first kv_len keys (padded
// query rows included) and with dropout, against the fp32 kernel on the same bf16-rounded operands
// with the same options, at the tolerances above (att 1e-5; out and dqkv 1e-2 of their largest
// magnitude); masked keys' dk and dv exactly 0; any pool size the same bits.
TEST(AttentionBf16, BidirectionalWithDropoutMatchesFp32) {
  if (!kernels::DetectBf16().avx512_bf16) GTEST_SKIP() << kernels::DetectBf16().Describe();
  kernels::InitBlas();
  const int B = 3, T = 150, NH = 4, hs = 16, C = NH * hs;  // T crosses the 72-row blocks
  const std::vector<int> kv_len = {T, 97, 1};
  std::mt19937 rng(12);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (int NKV : {4, 2}) {
    for (float dropout : {0.f, 0.1f}) {
      SCOPED_TRACE("NKV " + std::to_string(NKV) + " dropout " + std::to_string(dropout));
      kernels::AttentionOptions opt;
      opt.kv_len = kv_len.data();
      opt.dropout = dropout;
      opt.dropout_seed = 31;
      opt.dropout_offset = 7;
      const int R = (NH + 2 * NKV) * hs;
      std::vector<float> qkv(std::size_t(B) * T * R), dout(std::size_t(B) * T * C);
      for (float& x : qkv) x = Bf16ToFloat(FloatToBf16(0.4f * u(rng)));
      for (float& x : dout) x = Bf16ToFloat(FloatToBf16(0.05f * u(rng)));
      const AttentionRun b16 = RunAttention(true, 3, qkv, dout, B, T, C, NH, NKV, opt);
      const AttentionRun f32 = RunAttention(false, 3, qkv, dout, B, T, C, NH, NKV, opt);
      for (std::size_t i = 0; i < b16.att.size(); ++i)
        ASSERT_NEAR(b16.att[i], f32.att[i], 1e-5) << i;
      const float tol_out = 1e-2f * MaxAbs(f32.out);
      for (std::size_t i = 0; i < b16.out.size(); ++i)
        ASSERT_NEAR(b16.out[i], f32.out[i], tol_out) << "out " << i;
      // dq, dk and dv each against their own largest magnitude: dq and dk are an order smaller
      // than dv here, and a bound set by dv would not see a wrong dq.
      const int part[4] = {0, NH * hs, (NH + NKV) * hs, R};
      for (int j = 0; j < 3; ++j) {
        float mx = 0;
        for (std::size_t row = 0; row < std::size_t(B) * T; ++row)
          for (int c = part[j]; c < part[j + 1]; ++c)
            mx = std::max(mx, std::fabs(f32.dqkv[row * R + c]));
        for (std::size_t row = 0; row < std::size_t(B) * T; ++row) {
          for (int c = part[j]; c < part[j + 1]; ++c) {
            ASSERT_NEAR(b16.dqkv[row * R + c], f32.dqkv[row * R + c], 1e-2f * mx)
                << "dqkv part " << j << " " << row << "," << c;
          }
        }
      }
      for (int b = 0; b < B; ++b) {
        for (int s = kv_len[b]; s < T; ++s) {
          for (int c = NH * hs; c < R; ++c)
            ASSERT_EQ(b16.dqkv[(std::size_t(b) * T + s) * R + c], 0.f) << b << "," << s;
        }
      }
      const AttentionRun one = RunAttention(true, 1, qkv, dout, B, T, C, NH, NKV, opt);
      EXPECT_EQ(one.out, b16.out);
      EXPECT_EQ(one.att, b16.att);
      EXPECT_EQ(one.dqkv, b16.dqkv);
    }
  }
}

// Sliding-window attention with bf16 products (Mistral's, Gemma 3's local layers), with a scale of
// its own (Gemma's query_pre_attn_scalar): against the fp32 kernel on the same bf16-rounded
// operands at the tolerances above, probabilities exactly 0 outside the window, any pool size
// the same bits. The window (40) is shorter than T (150) and than a 72-row block.
TEST(AttentionBf16, SlidingWindowMatchesFp32) {
  if (!kernels::DetectBf16().avx512_bf16) GTEST_SKIP() << kernels::DetectBf16().Describe();
  kernels::InitBlas();
  const int B = 2, T = 150, NH = 4, NKV = 2, hs = 16, C = NH * hs, R = (NH + 2 * NKV) * hs;
  std::mt19937 rng(13);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  kernels::AttentionOptions opt;
  opt.window = 40;
  opt.scale = 0.2f;
  std::vector<float> qkv(std::size_t(B) * T * R), dout(std::size_t(B) * T * C);
  for (float& x : qkv) x = Bf16ToFloat(FloatToBf16(0.4f * u(rng)));
  for (float& x : dout) x = Bf16ToFloat(FloatToBf16(0.05f * u(rng)));
  const AttentionRun b16 = RunAttention(true, 3, qkv, dout, B, T, C, NH, NKV, opt);
  const AttentionRun f32 = RunAttention(false, 3, qkv, dout, B, T, C, NH, NKV, opt);
  for (std::size_t i = 0; i < b16.att.size(); ++i) {
    ASSERT_NEAR(b16.att[i], f32.att[i], 1e-5) << i;
    const int t = int(i / T % T), s = int(i % T);
    if (s > t || t - s >= opt.window) {
      ASSERT_EQ(b16.att[i], 0.f) << i;
    }
  }
  const float tol_out = 1e-2f * MaxAbs(f32.out), tol_d = 1e-2f * MaxAbs(f32.dqkv);
  for (std::size_t i = 0; i < b16.out.size(); ++i)
    ASSERT_NEAR(b16.out[i], f32.out[i], tol_out) << "out " << i;
  for (std::size_t i = 0; i < b16.dqkv.size(); ++i)
    ASSERT_NEAR(b16.dqkv[i], f32.dqkv[i], tol_d) << "dqkv " << i;
  const AttentionRun one = RunAttention(true, 1, qkv, dout, B, T, C, NH, NKV, opt);
  EXPECT_EQ(one.out, b16.out);
  EXPECT_EQ(one.dqkv, b16.dqkv);
}

}  // namespace
}  // namespace cputrain
