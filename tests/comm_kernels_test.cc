// The comm kernels and the shard partition: SumInto is bit-identical to a scalar left-to-right
// sum for every source count, length, misalignment and aliasing the collectives use;
// ShardBounds/SplitRange partition exactly, on cache-line boundaries.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "comm/comm.h"
#include "comm/kernels.h"

namespace cputrain::comm {
namespace {

// Values spread over many binades so that the order of summation changes the rounded result:
// a reordered kernel would fail the bit comparison.
std::vector<float> RandomValues(std::size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::uniform_int_distribution<int> expo(-20, 20);
  std::vector<float> v(n);
  for (float& x : v) x = std::ldexp(mant(rng), expo(rng));
  return v;
}

uint32_t Bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

float ReferenceSum(const std::vector<const float*>& srcs, std::size_t i) {
  float a = srcs[0][i];
  for (std::size_t k = 1; k < srcs.size(); ++k) a += srcs[k][i];
  return a;
}

TEST(CommKernels, SumIntoMatchesLeftToRightScalarSumBitForBit) {
  for (int nsrc = 1; nsrc <= 12; ++nsrc) {
    for (std::size_t n : {0u, 1u, 7u, 8u, 31u, 32u, 33u, 255u, 256u, 257u, 1000u, 4099u}) {
      for (std::size_t misalign : {0u, 1u, 3u}) {
        std::vector<std::vector<float>> data;
        std::vector<const float*> srcs;
        for (int k = 0; k < nsrc; ++k) {
          data.push_back(RandomValues(n + misalign, 100u * static_cast<uint32_t>(k) + n));
        }
        for (int k = 0; k < nsrc; ++k)
          srcs.push_back(data[static_cast<std::size_t>(k)].data() + misalign);
        std::vector<float> dst(n + 5, -7.0f);
        SumInto(dst.data() + 1, srcs.data(), nsrc, n);
        for (std::size_t i = 0; i < n; ++i) {
          ASSERT_EQ(Bits(dst[i + 1]), Bits(ReferenceSum(srcs, i)))
              << "nsrc=" << nsrc << " n=" << n << " misalign=" << misalign << " i=" << i;
        }
        EXPECT_EQ(dst[0], -7.0f) << "wrote before dst";
        EXPECT_EQ(dst[n + 1], -7.0f) << "wrote past dst + n";
      }
    }
  }
}

TEST(CommKernels, SumIntoAllowsDstToAliasAnySource) {
  for (int nsrc : {1, 2, 3, 8, 9, 11}) {
    for (int alias = 0; alias < nsrc; ++alias) {
      const std::size_t n = 1003;
      std::vector<std::vector<float>> data;
      std::vector<const float*> srcs;
      for (int k = 0; k < nsrc; ++k) data.push_back(RandomValues(n, 7u + static_cast<uint32_t>(k)));
      for (auto& d : data) srcs.push_back(d.data());
      std::vector<float> expected(n);
      for (std::size_t i = 0; i < n; ++i) expected[i] = ReferenceSum(srcs, i);
      float* dst = data[static_cast<std::size_t>(alias)].data();
      SumInto(dst, srcs.data(), nsrc, n);
      for (std::size_t i = 0; i < n; ++i) {
        ASSERT_EQ(Bits(dst[i]), Bits(expected[i])) << "nsrc=" << nsrc << " alias=" << alias;
      }
    }
  }
}

TEST(CommKernels, StreamingStoresGiveTheSameBitsAtAnyAlignment) {
  for (int nsrc : {1, 2, 5, 8, 10}) {
    for (std::size_t shift : {0u, 1u, 3u, 8u}) {
      const std::size_t n = 1000 + shift;
      std::vector<std::vector<float>> data;
      std::vector<const float*> srcs;
      for (int k = 0; k < nsrc; ++k)
        data.push_back(RandomValues(n, 31u * static_cast<uint32_t>(k)));
      for (auto& d : data) srcs.push_back(d.data());
      std::vector<float> cached(n + 16, 9.0f), streamed(n + 16, 9.0f);
      SumIntoAt(cached.data() + shift, srcs.data(), nsrc, 0, n, StoreHint::kCached);
      SumIntoAt(streamed.data() + shift, srcs.data(), nsrc, 0, n, StoreHint::kStreaming);
      for (std::size_t i = 0; i < n + 16; ++i) {
        ASSERT_EQ(Bits(cached[i]), Bits(streamed[i])) << "nsrc=" << nsrc << " shift=" << shift;
      }
    }
  }
}

TEST(CommKernels, SumIntoAtReadsEverySourceAtTheOffset) {
  const std::size_t n = 5000, off = 37, len = 3001;
  std::vector<std::vector<float>> data;
  std::vector<const float*> bases;
  for (int k = 0; k < 4; ++k) data.push_back(RandomValues(n, 55u + static_cast<uint32_t>(k)));
  for (auto& d : data) bases.push_back(d.data());
  std::vector<float> dst(len);
  SumIntoAt(dst.data(), bases.data(), 4, off, len);
  for (std::size_t i = 0; i < len; ++i) {
    ASSERT_EQ(Bits(dst[i]), Bits(ReferenceSum(bases, off + i)));
  }
}

TEST(CommKernels, CopyAndCopyStreamingCopyExactlyAtAnyAlignment) {
  for (std::size_t n : {0u, 1u, 7u, 31u, 32u, 33u, 100u, 4097u}) {
    for (std::size_t shift : {0u, 1u, 5u, 8u}) {
      std::vector<float> src = RandomValues(n + 9, static_cast<uint32_t>(n));
      std::vector<float> a(n + 18, 3.0f), b(n + 18, 3.0f);
      Copy(a.data() + shift, src.data() + 1, n);
      CopyStreaming(b.data() + shift, src.data() + 1, n);
      for (std::size_t i = 0; i < n; ++i) {
        ASSERT_EQ(Bits(a[shift + i]), Bits(src[1 + i]));
        ASSERT_EQ(Bits(b[shift + i]), Bits(src[1 + i]));
      }
      EXPECT_EQ(b[shift + n], 3.0f);
      if (shift > 0) {
        EXPECT_EQ(b[shift - 1], 3.0f);
      }
    }
  }
}

TEST(CommShards, ShardBoundsPartitionContiguouslyOnCacheLines) {
  for (std::size_t n : {0u, 1u, 7u, 15u, 16u, 17u, 100u, 1000u, 4096u, 100003u, 1048579u}) {
    for (int G = 1; G <= 9; ++G) {
      std::size_t expect_lo = 0, min_size = SIZE_MAX, max_size = 0;
      for (int g = 0; g < G; ++g) {
        const Range r = ShardBounds(n, G, g);
        EXPECT_EQ(r.lo, expect_lo) << "n=" << n << " G=" << G << " g=" << g;
        EXPECT_LE(r.lo, r.hi);
        EXPECT_EQ(r.lo % kShardAlign, 0u);
        if (g + 1 < G) {
          EXPECT_EQ(r.hi % kShardAlign, 0u);
          min_size = std::min(min_size, r.size());
          max_size = std::max(max_size, r.size());
        }
        expect_lo = r.hi;
      }
      EXPECT_EQ(expect_lo, n) << "shards must cover [0, n)";
      // Balanced: the first G-1 shards differ by at most one alignment unit, and each is within
      // one unit of n / G.
      if (G > 1) {
        EXPECT_LE(max_size - min_size, kShardAlign);
        EXPECT_LE(max_size, n / static_cast<std::size_t>(G) + kShardAlign);
      }
    }
  }
}

TEST(CommShards, SplitRangeCutsAtAbsoluteCacheLinesAndCovers) {
  for (Range r : {Range{0, 0}, Range{5, 5}, Range{0, 1}, Range{16, 1000}, Range{48, 1048579},
                  Range{32, 35}}) {
    for (int parts = 1; parts <= 5; ++parts) {
      std::size_t expect = r.lo;
      for (int p = 0; p < parts; ++p) {
        const Range s = SplitRange(r, parts, p);
        EXPECT_EQ(s.lo, expect);
        EXPECT_LE(s.lo, s.hi);
        if (p > 0 && !s.empty() && s.lo != r.lo) {
          EXPECT_EQ(s.lo % kShardAlign, 0u);
        }
        expect = s.hi;
      }
      EXPECT_EQ(expect, r.empty() ? r.lo : r.hi);
    }
  }
}

}  // namespace
}  // namespace cputrain::comm
