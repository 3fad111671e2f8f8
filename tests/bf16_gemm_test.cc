// Our VDPBF16PS kernel (bench/own_bf16gemm.h) against a plain triple loop over the same bf16
// values in double, on every layout (A and B each plain or transposed, strided), odd K (the
// padded last pair), edges smaller than the 12x32 tile and sizes crossing the blocking.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "bench/own_bf16gemm.h"
#include "kernels/bf16.h"

namespace cputrain {
namespace {

uint16_t Value(std::size_t i, uint32_t salt) {
  const uint32_t h = static_cast<uint32_t>(i) * 2654435761u + salt * 40503u;
  return kernels::FloatToBf16((static_cast<float>(h >> 8 & 1023) / 1023.0f - 0.5f) * 0.1f);
}

void Check(int M, int N, int K, bool ta, bool tb) {
  const int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 7;
  std::vector<uint16_t> A(static_cast<std::size_t>(ta ? K : M) * lda),
      B(static_cast<std::size_t>(tb ? N : K) * ldb);
  for (std::size_t i = 0; i < A.size(); ++i) A[i] = Value(i, 1);
  for (std::size_t i = 0; i < B.size(); ++i) B[i] = Value(i, 2);
  std::vector<float> C(static_cast<std::size_t>(M) * ldc, -99.f);
  bench::OwnBf16Gemm(M, N, K, A.data(), ta, lda, B.data(), tb, ldb, C.data(), ldc);
  for (int i = 0; i < M; ++i) {
    for (int j = 0; j < N; ++j) {
      double ref = 0;
      for (int k = 0; k < K; ++k) {
        const uint16_t a = ta ? A[k * lda + i] : A[i * lda + k];
        const uint16_t b = tb ? B[j * ldb + k] : B[k * ldb + j];
        ref += static_cast<double>(kernels::Bf16ToFloat(a)) * kernels::Bf16ToFloat(b);
      }
      // Products of bf16 are exact in fp32; only the fp32 sums round: ~K ulp of |terms| <= 0.0025.
      ASSERT_NEAR(C[i * ldc + j], ref, 1e-6 * (K + 1))
          << M << "x" << N << "x" << K << " ta=" << ta << " tb=" << tb << " at " << i << "," << j;
    }
    for (int j = N; j < ldc; ++j) ASSERT_EQ(C[i * ldc + j], -99.f) << "wrote past column N";
  }
}

TEST(OwnBf16Gemm, MatchesTripleLoopOnEveryLayoutAndEdge) {
  if (!kernels::DetectBf16().avx512_bf16) GTEST_SKIP() << kernels::DetectBf16().Describe();
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (auto [M, N, K] :
           {std::tuple{1, 1, 1}, std::tuple{12, 32, 2}, std::tuple{13, 33, 7},
            std::tuple{5, 70, 385}, std::tuple{130, 40, 800}, std::tuple{24, 4100, 3}}) {
        Check(M, N, K, ta, tb);
      }
    }
  }
}

}  // namespace
}  // namespace cputrain
