// Finite-difference checks of every layer's backward: for a random upstream weighting w,
// L(x) = sum_i w_i * layer(x)_i, and each kernel's analytic dL/dx must match the central
// difference (L(x + h e_k) - L(x - h e_k)) / 2h on sampled elements k of every input.
//
// Tolerance |num - ana| <= 1e-2 |ana| + 2e-3, from the error budget of h = 1e-2 in fp32: the
// truncation error h^2 f''' / 6 is ~1e-5 for these O(1) functions and the rounding noise of L
// (a few hundred fp32 outputs, summed in double) over 2h is ~1e-4. A wrong term, a missing
// scale or a transposed index moves the derivative by O(1) and fails by orders of magnitude.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "runtime/worker_pool.h"

namespace cputrain::kernels {
namespace {

constexpr float kH = 1e-2f;

std::vector<float> Random(std::size_t n, std::mt19937& rng, float scale = 1.f) {
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

double Weighted(const std::vector<float>& out, const std::vector<float>& w) {
  double s = 0;
  for (std::size_t i = 0; i < out.size(); ++i) s += static_cast<double>(out[i]) * w[i];
  return s;
}

// Checks analytic gradient `ana` of loss() with respect to `x` at up to `samples` elements.
void CheckGrad(const std::string& what, std::vector<float>& x, const std::vector<float>& ana,
               const std::function<double()>& loss, int samples = 40) {
  ASSERT_EQ(x.size(), ana.size()) << what;
  std::mt19937 rng(7);
  const std::size_t n = x.size();
  for (int s = 0; s < samples && s < static_cast<int>(n); ++s) {
    const std::size_t k = n <= static_cast<std::size_t>(samples) ? s : rng() % n;
    const float saved = x[k];
    x[k] = saved + kH;
    const double up = loss();
    x[k] = saved - kH;
    const double down = loss();
    x[k] = saved;
    const double num = (up - down) / (2.0 * kH);
    EXPECT_NEAR(num, ana[k], 1e-2 * std::fabs(ana[k]) + 2e-3)
        << what << "[" << k << "]: numeric " << num << " analytic " << ana[k];
  }
}

class FiniteDifference : public ::testing::Test {
 protected:
  void SetUp() override { InitBlas(); }
  WorkerPool pool_{std::vector<int>(2, 0), nullptr, "fd"};
  std::mt19937 rng_{1234};
};

TEST_F(FiniteDifference, Encoder) {
  const int B = 2, T = 5, C = 12, V = 7;
  std::vector<int> inp = {1, 3, 3, 0, 6, 2, 3, 1, 1, 5};  // repeated tokens on purpose
  auto wte = Random(V * C, rng_), wpe = Random(T * C, rng_), w = Random(B * T * C, rng_);
  std::vector<float> out(B * T * C);
  auto loss = [&] {
    EncoderForward(pool_, out.data(), inp.data(), wte.data(), wpe.data(), B, T, C);
    return Weighted(out, w);
  };
  std::vector<float> dwte(V * C, 0.f), dwpe(T * C, -1.f);  // dwpe is written, dwte added to
  EncoderBackward(pool_, dwte.data(), dwpe.data(), w.data(), inp.data(), B, T, C);
  CheckGrad("dwte", wte, dwte, loss, 84);
  CheckGrad("dwpe", wpe, dwpe, loss, 60);
}

TEST_F(FiniteDifference, LayerNorm) {
  const std::size_t N = 6;
  const int C = 13;  // not a multiple of 8: exercises the vector tails
  auto x = Random(N * C, rng_, 2.f), wt = Random(C, rng_), bs = Random(C, rng_),
       w = Random(N * C, rng_);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] += 0.5f;  // a non-zero mean
  std::vector<float> out(N * C), mean(N), rstd(N);
  auto loss = [&] {
    LayerNormForward(pool_, out.data(), mean.data(), rstd.data(), x.data(), wt.data(), bs.data(), N,
                     C);
    return Weighted(out, w);
  };
  loss();
  std::vector<float> dx(N * C, 0.f), dw(C), db(C);
  LayerNormBackward(pool_, dx.data(), dw.data(), db.data(), w.data(), x.data(), wt.data(),
                    mean.data(), rstd.data(), N, C);
  CheckGrad("dinp", x, dx, loss, 78);
  CheckGrad("dweight", wt, dw, loss, C);
  CheckGrad("dbias", bs, db, loss, C);
}

TEST_F(FiniteDifference, Matmul) {
  const std::size_t N = 9;
  const int C = 11, OC = 21, ldo = 24;  // padded output rows, as the LM head uses
  auto x = Random(N * C, rng_), wt = Random(OC * C, rng_), bs = Random(OC, rng_);
  auto w = Random(N * ldo, rng_);
  std::vector<float> out(N * ldo, 0.f);
  auto loss = [&] {
    MatmulForward(pool_, out.data(), x.data(), wt.data(), bs.data(), N, C, OC, ldo);
    double s = 0;
    for (std::size_t n = 0; n < N; ++n)
      for (int o = 0; o < OC; ++o) s += double(out[n * ldo + o]) * w[n * ldo + o];
    return s;
  };
  std::vector<float> dx(N * C), dwt(OC * C), db(OC);
  MatmulBackward(pool_, dx.data(), dwt.data(), db.data(), w.data(), x.data(), wt.data(), N, C, OC,
                 ldo);
  CheckGrad("dinp", x, dx, loss);
  CheckGrad("dweight", wt, dwt, loss);
  CheckGrad("dbias", bs, db, loss, OC);
}

TEST_F(FiniteDifference, Attention) {
  const int B = 2, T = 7, C = 12, NH = 3;  // hs = 4; T not a multiple of anything
  auto qkv = Random(B * T * 3 * C, rng_), w = Random(B * T * C, rng_);
  std::vector<float> out(B * T * C), att(B * NH * T * T);
  auto loss = [&] {
    AttentionForward(pool_, out.data(), att.data(), qkv.data(), B, T, C, NH);
    return Weighted(out, w);
  };
  loss();
  // Causality: row t of every head's probabilities is zero after t and sums to 1.
  for (int bh = 0; bh < B * NH; ++bh) {
    for (int t = 0; t < T; ++t) {
      double s = 0;
      for (int j = 0; j < T; ++j) {
        const float p = att[(bh * T + t) * T + j];
        if (j > t) {
          ASSERT_EQ(p, 0.f);
        }
        s += p;
      }
      ASSERT_NEAR(s, 1.0, 1e-6);
    }
  }
  std::vector<float> dqkv(B * T * 3 * C), scratch(AttentionScratchFloats(pool_.size(), T));
  AttentionBackward(pool_, dqkv.data(), scratch.data(), w.data(), qkv.data(), att.data(), B, T, C,
                    NH);
  CheckGrad("dqkv", qkv, dqkv, loss, 120);
}

TEST_F(FiniteDifference, Gelu) {
  const std::size_t n = 37;
  auto x = Random(n, rng_, 2.f), w = Random(n, rng_);
  std::vector<float> out(n);
  auto loss = [&] {
    GeluForward(pool_, out.data(), x.data(), n);
    return Weighted(out, w);
  };
  // Spot values against the tanh formula.
  loss();
  for (std::size_t i = 0; i < n; ++i) {
    const double u = std::sqrt(2.0 / M_PI) * (x[i] + 0.044715 * std::pow(x[i], 3));
    ASSERT_NEAR(out[i], 0.5 * x[i] * (1 + std::tanh(u)), 2e-6 * (1 + std::fabs(x[i])));
  }
  std::vector<float> dx(n);
  GeluBackward(pool_, dx.data(), x.data(), w.data(), n);
  CheckGrad("dinp", x, dx, loss, n);
}

TEST_F(FiniteDifference, CrossEntropy) {
  const std::size_t N = 5;
  const int V = 19, Vp = 32;
  auto logits = Random(N * Vp, rng_, 3.f);
  std::vector<int> targets = {0, 18, 7, 7, 3};
  std::vector<float> losses(N), lse(N);
  const float dloss = 0.37f;
  auto loss = [&] {
    CrossEntropyForward(pool_, losses.data(), lse.data(), logits.data(), targets.data(), N, V, Vp);
    double s = 0;
    for (float l : losses) s += l;
    return s * dloss;
  };
  loss();
  for (std::size_t n = 0; n < N; ++n) {  // against a direct log-softmax in double
    double m = -1e30, z = 0;
    for (int v = 0; v < V; ++v) m = std::max(m, double(logits[n * Vp + v]));
    for (int v = 0; v < V; ++v) z += std::exp(logits[n * Vp + v] - m);
    ASSERT_NEAR(losses[n], m + std::log(z) - logits[n * Vp + targets[n]], 1e-5);
  }
  std::vector<float> d(logits);
  for (std::size_t n = 0; n < N; ++n)
    for (int v = V; v < Vp; ++v) d[n * Vp + v] = 0.f;  // padding columns: never touched
  CrossEntropyBackward(pool_, d.data(), logits.data(), lse.data(), targets.data(), dloss, N, V, Vp);
  CheckGrad("dlogits", logits, d, loss, 95);
}

}  // namespace
}  // namespace cputrain::kernels
