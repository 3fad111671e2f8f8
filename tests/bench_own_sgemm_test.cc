// bench/own_sgemm.h: the own AVX2 kernel that `bench gemm` compares with OpenBLAS computes the
// same products as a plain triple loop, for every operand layout the bench uses (transposed A,
// transposed B) and sizes that exercise each edge: M and N not multiples of the 6x16 tile, K
// across the KC = 256 slices, N across the NC = 4080 blocks, accumulate on and off, C with a row
// stride wider than N. If this failed, the bench's "own" column would compare wrong answers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "bench/own_sgemm.h"

namespace cputrain::bench {
namespace {

// Small integers: every product and partial sum is exact in fp32, so any summation order gives
// the same bits and the comparison can be exact.
std::vector<float> Ints(std::size_t n, uint32_t seed) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = static_cast<float>(static_cast<int>((i * 2654435761u + seed * 97u) >> 7 & 7) - 3);
  }
  return v;
}

void Check(int M, int N, int K, bool trans_a, bool trans_b, bool accumulate) {
  SCOPED_TRACE(testing::Message() << "M=" << M << " N=" << N << " K=" << K << " transA=" << trans_a
                                  << " transB=" << trans_b << " acc=" << accumulate);
  const std::vector<float> a = Ints(static_cast<std::size_t>(M) * K, 1);
  const std::vector<float> b = Ints(static_cast<std::size_t>(K) * N, 2);
  // A(i,k) stored row-major (M,K) or transposed (K,M); likewise B.
  const MatView A = trans_a ? MatView{a.data(), 1, M} : MatView{a.data(), K, 1};
  const MatView B = trans_b ? MatView{b.data(), 1, K} : MatView{b.data(), N, 1};
  const int ldc = N + 5;
  std::vector<float> c = Ints(static_cast<std::size_t>(M) * ldc, 3);
  std::vector<float> want = c;
  for (int i = 0; i < M; ++i) {
    for (int j = 0; j < N; ++j) {
      float s = 0;
      for (int k = 0; k < K; ++k) s += A.p[i * A.rs + k * A.cs] * B.p[k * B.rs + j * B.cs];
      want[static_cast<std::size_t>(i) * ldc + j] =
          accumulate ? want[static_cast<std::size_t>(i) * ldc + j] + s : s;
    }
  }
  OwnSgemm(M, N, K, A, B, c.data(), ldc, accumulate);
  int bad = 0;
  for (std::size_t i = 0; i < c.size(); ++i) {
    if (c[i] != want[i] && ++bad <= 5) {
      ADD_FAILURE() << "element " << i / ldc << "," << i % ldc << ": " << c[i] << " != " << want[i];
    }
  }
  EXPECT_EQ(bad, 0) << "the padding columns beyond N must be untouched too";
}

TEST(OwnSgemm, MatchesTripleLoopOnEveryLayoutAndEdge) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      Check(1, 1, 1, ta, tb, false);
      Check(6, 16, 8, ta, tb, false);
      Check(7, 17, 3, ta, tb, true);
      Check(13, 33, 300, ta, tb, false);  // K across two KC slices
      Check(170, 20, 257, ta, tb, true);  // M across two MC blocks
    }
  }
  Check(5, 4100, 9, false, true, false);  // N across two NC blocks
}

TEST(OwnSgemm, EmptyProductsAreSafe) {
  std::vector<float> c(4, 7.f);
  const float x = 1;
  OwnSgemm(0, 2, 2, {&x, 1, 1}, {&x, 1, 1}, c.data(), 2, false);
  EXPECT_EQ(c[0], 7.f);
  OwnSgemm(2, 2, 0, {&x, 1, 1}, {&x, 1, 1}, c.data(), 2, false);  // K = 0: C = 0
  EXPECT_EQ(c[0], 0.f);
  EXPECT_EQ(c[3], 0.f);
}

}  // namespace
}  // namespace cputrain::bench
