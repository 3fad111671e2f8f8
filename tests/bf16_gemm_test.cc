// Every bf16 kernel that runs here (kernels/bf16.h: our VDPBF16PS kernel, our AMX kernel on the
// real tiles where the CPU has them and on the portable tile model everywhere, oneDNN's matmul
// where the build has it) against a plain triple loop over the same bf16 values in double, on
// every layout (A and B each plain or transposed, strided), odd K (the padded last pair), edges
// smaller than the micro-tiles (12x32, 32x32), sizes crossing the blocking, and `add` (C += A @ B);
// then the products built on the active kernel: the model's linear layers and attention. Each test
// runs once per kernel (the kernel made active first); a kernel that cannot run here is skipped
// with the reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "bf16_kernels.h"
#include "kernels/bf16.h"
#include "kernels/kernels.h"
#include "runtime/worker_pool.h"

namespace cputrain {
namespace {

using kernels::Bf16Kernel;

class Bf16Kernels : public ::testing::TestWithParam<Bf16Kernel> {
 protected:
  void SetUp() override {
    if (const std::string why = test::ActivateBf16Kernel(GetParam()); !why.empty()) {
      GTEST_SKIP() << why;
    }
  }
  // The tile model is the AMX kernel computed in C++: small shapes keep it to seconds.
  bool slow() const { return GetParam() == Bf16Kernel::kTileModel; }
};

uint16_t Value(std::size_t i, uint32_t salt) {
  const uint32_t h = static_cast<uint32_t>(i) * 2654435761u + salt * 40503u;
  return kernels::FloatToBf16((static_cast<float>(h >> 8 & 1023) / 1023.0f - 0.5f) * 0.1f);
}

void Check(int M, int N, int K, bool ta, bool tb, bool add) {
  const int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 7;
  std::vector<uint16_t> A(static_cast<std::size_t>(ta ? K : M) * lda),
      B(static_cast<std::size_t>(tb ? N : K) * ldb);
  for (std::size_t i = 0; i < A.size(); ++i) A[i] = Value(i, 1);
  for (std::size_t i = 0; i < B.size(); ++i) B[i] = Value(i, 2);
  std::vector<float> C(static_cast<std::size_t>(M) * ldc, -99.f);
  const float before = add ? 0.25f : 0.f;  // with add, C starts at 0.25 inside the M x N block
  if (add)
    for (int i = 0; i < M; ++i) std::fill(&C[i * ldc], &C[i * ldc] + N, before);
  kernels::Bf16Gemm(kernels::GemmClass::kFwd, M, N, K, A.data(), ta, lda, B.data(), tb, ldb,
                    C.data(), ldc, add);
  for (int i = 0; i < M; ++i) {
    for (int j = 0; j < N; ++j) {
      double ref = before;
      for (int k = 0; k < K; ++k) {
        const uint16_t a = ta ? A[k * lda + i] : A[i * lda + k];
        const uint16_t b = tb ? B[j * ldb + k] : B[k * ldb + j];
        ref += static_cast<double>(kernels::Bf16ToFloat(a)) * kernels::Bf16ToFloat(b);
      }
      // Products of bf16 are exact in fp32; only the fp32 sums round: ~K ulp of |terms| <= 0.0025.
      ASSERT_NEAR(C[i * ldc + j], ref, 1e-6 * (K + 1))
          << M << "x" << N << "x" << K << " ta=" << ta << " tb=" << tb << " add=" << add << " at "
          << i << "," << j;
    }
    for (int j = N; j < ldc; ++j) ASSERT_EQ(C[i * ldc + j], -99.f) << "wrote past column N";
  }
}

TEST_P(Bf16Kernels, GemmMatchesTripleLoopOnEveryLayoutEdgeAndAdd) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (auto [M, N, K] : {std::tuple{1, 1, 1}, std::tuple{12, 32, 2}, std::tuple{13, 33, 7},
                             std::tuple{32, 32, 32}, std::tuple{33, 31, 65}, std::tuple{5, 70, 385},
                             std::tuple{130, 40, slow() ? 530 : 800}, std::tuple{24, 4100, 3}}) {
        for (bool add : {false, true}) Check(M, N, K, ta, tb, add);
      }
    }
  }
}

// The model's bf16 products (MatmulForwardBf16, MatmulBackwardBf16) are the fp32 products of the
// bf16-rounded operands: checked against MatmulForward/MatmulBackward run on rounded copies,
// with a bias, accumulate, a padded output stride (the LM head's ldo = Vp > OC), and both splits
// of dinp (N >= C by rows, N < C by columns). Only the fp32 sums' order differs, so 1e-5.
std::vector<float> Rounded(const std::vector<float>& x) {
  std::vector<float> r(x.size());
  for (std::size_t i = 0; i < x.size(); ++i)
    r[i] = kernels::Bf16ToFloat(kernels::FloatToBf16(x[i]));
  return r;
}

std::vector<float> Filled(std::size_t n, uint32_t salt) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = kernels::Bf16ToFloat(Value(i, salt)) * 7.3f + 1e-4f;
  return v;
}

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  float scale = 0;
  for (float w : want) scale = std::max(scale, std::abs(w));
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-5f * scale) << what << " at " << i;
}

void CheckMatmul(WorkerPool& pool, std::size_t N, int C, int OC, int ld, bool accumulate) {
  const std::vector<float> inp = Filled(N * C, 3), w = Filled(static_cast<std::size_t>(OC) * C, 4),
                           bias = Filled(OC, 5), dout = Filled(N * ld, 6);
  std::vector<uint16_t> w16(w.size()), in16(N * C), d16(N * ld);
  for (std::size_t i = 0; i < w.size(); ++i) w16[i] = kernels::FloatToBf16(w[i]);
  // forward
  std::vector<float> out(N * ld, 0.f), want(N * ld, 0.f);
  kernels::MatmulForwardBf16(pool, out.data(), inp.data(), in16.data(), w16.data(), bias.data(), N,
                             C, OC, ld);
  kernels::MatmulForward(pool, want.data(), Rounded(inp).data(), Rounded(w).data(), bias.data(), N,
                         C, OC, ld);
  ExpectClose(out, want, "forward");
  // backward; with accumulate the gradients start from the same values on both sides
  std::vector<float> dinp(N * C), dw = Filled(w.size(), 7), db = Filled(OC, 8);
  std::vector<float> want_dinp(N * C), want_dw = dw, want_db = db;
  kernels::MatmulBackwardBf16(pool, dinp.data(), dw.data(), db.data(), dout.data(), d16.data(),
                              inp.data(), in16.data(), w16.data(), N, C, OC, ld, accumulate);
  kernels::MatmulBackward(pool, want_dinp.data(), want_dw.data(), want_db.data(),
                          Rounded(dout).data(), Rounded(inp).data(), Rounded(w).data(), N, C, OC,
                          ld, accumulate);
  ExpectClose(dinp, want_dinp, "dinp");
  ExpectClose(dw, want_dw, "dweight");
  // dbias sums the fp32 dout (as autocast: the bias add is not a product)
  std::vector<float> expect_db = accumulate ? Filled(OC, 8) : std::vector<float>(OC, 0.f);
  for (std::size_t n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) expect_db[o] += dout[n * ld + o];
  ExpectClose(db, expect_db, "dbias");
}

TEST_P(Bf16Kernels, MatmulIsTheFp32ProductOfRoundedOperands) {
  kernels::InitBlas();
  WorkerPool pool{std::vector<int>(2, 0), nullptr, "bf16"};
  for (bool acc : {false, true}) {
    CheckMatmul(pool, 48, 40, 72, 72, acc);    // N >= C: dinp split by rows
    CheckMatmul(pool, 24, 96, 300, 384, acc);  // N < C, padded stride (an LM head)
  }
}

TEST_P(Bf16Kernels, MatmulBitIdenticalRerunsForAPoolSize) {
  WorkerPool pool{std::vector<int>(3, 0), nullptr, "bf16"};
  const std::size_t N = 40;
  const int C = 64, OC = 200;
  const std::vector<float> inp = Filled(N * C, 9);
  std::vector<uint16_t> w16(static_cast<std::size_t>(OC) * C), in16(N * C);
  for (std::size_t i = 0; i < w16.size(); ++i) w16[i] = Value(i, 10);
  std::vector<float> a(N * OC), b(N * OC);
  kernels::MatmulForwardBf16(pool, a.data(), inp.data(), in16.data(), w16.data(), nullptr, N, C, OC,
                             OC);
  kernels::MatmulForwardBf16(pool, b.data(), inp.data(), in16.data(), w16.data(), nullptr, N, C, OC,
                             OC);
  EXPECT_EQ(a, b);
}

// Attention with bf16 products against a double-precision reference over the same bf16-rounded
// operands. Where the kernel rounds one of its own fp32 intermediates (P for P v and P^T dy), the
// reference rounds the kernel's P too, so only fp32 summation separates them (1e-5); dS is
// recomputed in double and rounded by the reference, and a value within an ulp of a rounding
// boundary may round the other way there (2^-8 on one of T terms), hence 1e-3 of the largest |dq|,
// |dk| (a wrong operand, scale or transpose is off by O(1)). T = 150 crosses the row blocks (72
// rows on VDPBF16PS, 64 on AMX).
struct AttentionCase {
  int B = 2, T = 150, C = 64, NH = 4;
  int window = 0;              // AttentionOptions::window (0: none)
  std::vector<int> doc_start;  // AttentionOptions::doc_start (empty: none)
  std::vector<float> qkv, dout;
  AttentionCase() : qkv(static_cast<std::size_t>(B) * T * 3 * C), dout(std::size_t(B) * T * C) {
    for (std::size_t i = 0; i < qkv.size(); ++i) qkv[i] = 8 * kernels::Bf16ToFloat(Value(i, 3));
    for (std::size_t i = 0; i < dout.size(); ++i) dout[i] = kernels::Bf16ToFloat(Value(i, 4));
  }
  // AttentionForwardBf16 then AttentionBackwardBf16 on a pool of `threads` workers.
  struct Result {
    std::vector<float> out, att, dqkv;
  };
  Result Run(int threads) const {
    WorkerPool pool(std::vector<int>(threads, 0), nullptr, "attn");
    Result r{std::vector<float>(std::size_t(B) * T * C),
             std::vector<float>(std::size_t(B) * NH * T * T),
             std::vector<float>(qkv.size(), -99.f)};
    std::vector<float> scratch(kernels::AttentionScratchFloats(threads, T));
    std::vector<uint16_t> qkv_b(qkv.size()), dout_b(dout.size()),
        sb(kernels::AttentionScratchBf16(threads, T));
    kernels::AttentionOptions opt;
    opt.window = window;
    opt.doc_start = doc_start.empty() ? nullptr : doc_start.data();
    kernels::AttentionForwardBf16(pool, r.out.data(), r.att.data(), qkv.data(), qkv_b.data(),
                                  sb.data(), B, T, C, NH, 0, opt);
    kernels::AttentionBackwardBf16(pool, r.dqkv.data(), scratch.data(), sb.data(), qkv_b.data(),
                                   dout_b.data(), dout.data(), qkv.data(), r.att.data(), B, T, C,
                                   NH, 0, opt);
    return r;
  }
  // The first key query t of row b attends (its last is t).
  int First(int b, int t) const {
    const int w = window > 0 && t >= window ? t - window + 1 : 0;
    return doc_start.empty() ? w : std::max(w, doc_start[std::size_t(b) * T + t]);
  }
};

float R(float x) { return kernels::Bf16ToFloat(kernels::FloatToBf16(x)); }

double MaxAbs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

void CheckAttentionAgainstReference(const AttentionCase& c) {
  const int B = c.B, T = c.T, C = c.C, NH = c.NH, hs = C / NH, C3 = 3 * C;
  const double scale = 1.0 / std::sqrt(double(hs));
  const auto [out, att, dqkv] = c.Run(3);
  auto q = [&](int b, int t, int h, int d, int part) {  // part 0 q, 1 k, 2 v: rounded
    return double(R(c.qkv[(std::size_t(b) * T + t) * C3 + part * C + h * hs + d]));
  };
  auto dy = [&](int b, int t, int h, int d) {
    return double(R(c.dout[(std::size_t(b) * T + t) * C + h * hs + d]));
  };
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const float* P = att.data() + (std::size_t(b) * NH + h) * T * T;
      std::vector<double> dS(std::size_t(T) * T, 0.0), ref_y(std::size_t(T) * hs),
          ref_dq(std::size_t(T) * hs), ref_dk(std::size_t(T) * hs), ref_dv(std::size_t(T) * hs);
      for (int t = 0; t < T; ++t) {
        const int f = c.First(b, t);
        std::vector<double> s(t + 1), dP(t + 1);
        double mx = -1e300, sum = 0, dot = 0;
        for (int j = f; j <= t; ++j) {
          for (int d = 0; d < hs; ++d) s[j] += q(b, t, h, d, 0) * q(b, j, h, d, 1) * scale;
          mx = std::max(mx, s[j]);
        }
        for (int j = f; j <= t; ++j) sum += std::exp(s[j] - mx);
        for (int j = 0; j < T; ++j) {
          const double p = j >= f && j <= t ? std::exp(s[j] - mx) / sum : 0.0;
          ASSERT_NEAR(P[std::size_t(t) * T + j], p, 1e-5) << "P at " << b << "," << h << "," << t;
        }
        for (int j = f; j <= t; ++j) {
          for (int d = 0; d < hs; ++d) dP[j] += dy(b, t, h, d) * q(b, j, h, d, 2);
          dot += double(P[std::size_t(t) * T + j]) * dP[j];
        }
        for (int j = f; j <= t; ++j) {
          const double p = P[std::size_t(t) * T + j];
          dS[std::size_t(t) * T + j] = R(float(p * (dP[j] - dot) * scale));
          for (int d = 0; d < hs; ++d) {
            ref_y[t * hs + d] += R(float(p)) * q(b, j, h, d, 2);
            ref_dv[j * hs + d] += R(float(p)) * dy(b, t, h, d);
          }
        }
      }
      for (int t = 0; t < T; ++t) {
        for (int j = c.First(b, t); j <= t; ++j) {
          for (int d = 0; d < hs; ++d) {
            ref_dq[t * hs + d] += dS[std::size_t(t) * T + j] * q(b, j, h, d, 1);
            ref_dk[j * hs + d] += dS[std::size_t(t) * T + j] * q(b, t, h, d, 0);
          }
        }
      }
      const double tol_dq = 1e-3 * MaxAbs(ref_dq), tol_dk = 1e-3 * MaxAbs(ref_dk);
      for (int t = 0; t < T; ++t) {
        for (int d = 0; d < hs; ++d) {
          const std::size_t at = (std::size_t(b) * T + t) * C3 + h * hs + d;
          ASSERT_NEAR(out[(std::size_t(b) * T + t) * C + h * hs + d], ref_y[t * hs + d], 1e-5);
          ASSERT_NEAR(dqkv[at], ref_dq[t * hs + d], tol_dq) << "dq " << b << "," << h << "," << t;
          ASSERT_NEAR(dqkv[at + C], ref_dk[t * hs + d], tol_dk) << "dk " << b << "," << h;
          ASSERT_NEAR(dqkv[at + 2 * C], ref_dv[t * hs + d], 1e-5) << "dv " << b << "," << h;
        }
      }
    }
  }
}

TEST_P(Bf16Kernels, AttentionForwardAndBackwardAreTheProductsOfRoundedOperands) {
  CheckAttentionAgainstReference(AttentionCase{});
}

// The families' and sft's masks on the same products: a sliding window shorter than T (Mistral,
// Gemma 3's local layers) and packed documents (sft --packing) starting inside a row block.
TEST_P(Bf16Kernels, WindowedAndPackedAttentionAreTheProductsOfRoundedOperands) {
  AttentionCase c;
  c.window = 40;
  c.doc_start.resize(std::size_t(c.B) * c.T);
  for (int t = 0; t < c.T; ++t) {
    c.doc_start[t] = t < 57 ? 0 : t < 100 ? 57 : 100;   // row 0: documents [0,57) [57,100) [100,T)
    c.doc_start[std::size_t(c.T) + t] = t < 9 ? 0 : 9;  // row 1: [0,9) [9,T)
  }
  CheckAttentionAgainstReference(c);
}

// One task runs on one worker, so any pool size gives the same bits.
TEST_P(Bf16Kernels, AttentionBitIdenticalForAnyPoolSize) {
  const AttentionCase c;
  std::vector<float> first;
  for (int threads : {1, 2, 3}) {
    auto [out, att, dqkv] = c.Run(threads);
    out.insert(out.end(), dqkv.begin(), dqkv.end());
    if (first.empty()) first = out;
    ASSERT_EQ(out, first) << threads << " threads";
  }
}

INSTANTIATE_TEST_SUITE_P(AllKernels, Bf16Kernels, test::AllBf16Kernels(), test::Bf16KernelTestName);

}  // namespace
}  // namespace cputrain
