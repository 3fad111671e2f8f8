// kernels/own_sgemm.h: our own AVX2 kernel (Fp32Kernel::kOwn, a candidate of every fp32 class
// the calibration times) computes the same products as a plain triple loop, for every operand
// layout the kernels use (transposed A, transposed B) and sizes that exercise each edge: M and N
// not multiples of the 6x16 tile, K across the KC = 256 slices, N across the NC = 4080 blocks,
// beta 0 and 1 (and another), alpha 1 and not, C with a row stride wider than N.
#include "kernels/own_sgemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

namespace cputrain::kernels::internal {
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

// A read-only strided view: element (i, j) is p[i * rs + j * cs].
struct View {
  const float* p;
  std::ptrdiff_t rs, cs;
};

// alpha 2 and beta 2 keep every value a small integer: still exact.
void Check(int M, int N, int K, bool trans_a, bool trans_b, float beta, float alpha = 1.f) {
  SCOPED_TRACE(testing::Message() << "M=" << M << " N=" << N << " K=" << K << " transA=" << trans_a
                                  << " transB=" << trans_b << " beta=" << beta
                                  << " alpha=" << alpha);
  const std::vector<float> a = Ints(static_cast<std::size_t>(M) * K, 1);
  const std::vector<float> b = Ints(static_cast<std::size_t>(K) * N, 2);
  // A(i,k) stored row-major (M,K) or transposed (K,M); likewise B.
  const View A = trans_a ? View{a.data(), 1, M} : View{a.data(), K, 1};
  const View B = trans_b ? View{b.data(), 1, K} : View{b.data(), N, 1};
  const int ldc = N + 5;
  std::vector<float> c = Ints(static_cast<std::size_t>(M) * ldc, 3);
  std::vector<float> want = c;
  for (int i = 0; i < M; ++i) {
    for (int j = 0; j < N; ++j) {
      float s = 0;
      for (int k = 0; k < K; ++k) s += A.p[i * A.rs + k * A.cs] * B.p[k * B.rs + j * B.cs];
      float& w = want[static_cast<std::size_t>(i) * ldc + j];
      w = beta == 0.f ? alpha * s : beta * w + alpha * s;
    }
  }
  OwnSgemm(trans_a, trans_b, M, N, K, alpha, a.data(), trans_a ? M : K, b.data(), trans_b ? K : N,
           beta, c.data(), ldc);
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
      Check(1, 1, 1, ta, tb, 0.f);
      Check(6, 16, 8, ta, tb, 0.f, 2.f);
      Check(7, 17, 3, ta, tb, 1.f);
      Check(13, 33, 300, ta, tb, 0.f);     // K across two KC slices
      Check(170, 20, 257, ta, tb, 1.f);    // M across two MC blocks
      Check(9, 18, 20, ta, tb, 2.f, 2.f);  // beta neither 0 nor 1: C scaled first
    }
  }
  Check(5, 4100, 9, false, true, 0.f);  // N across two NC blocks
}

TEST(OwnSgemm, EmptyProductsAreSafe) {
  std::vector<float> c(4, 7.f);
  const float x = 1;
  OwnSgemm(false, false, 0, 2, 2, 1.f, &x, 1, &x, 1, 0.f, c.data(), 2);
  EXPECT_EQ(c[0], 7.f);
  OwnSgemm(false, false, 2, 2, 0, 1.f, &x, 1, &x, 1, 0.f, c.data(), 2);  // K = 0: C = 0
  EXPECT_EQ(c[0], 0.f);
  EXPECT_EQ(c[3], 0.f);
}

}  // namespace
}  // namespace cputrain::kernels::internal
