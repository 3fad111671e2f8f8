// BF16 support below the model: the fp32 -> bf16 rounding (ties to even, as PyTorch rounds),
// the run-time detection and its test hook, and llm.c's bf16 (version 5) checkpoints loading as
// fp32 master weights.
#include "kernels/bf16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <vector>

#include "common/error.h"
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

}  // namespace
}  // namespace cputrain
