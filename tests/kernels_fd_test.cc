// Finite-difference checks of every layer's backward: for a random upstream weighting w,
// L(x) = sum_i w_i * layer(x)_i, and each kernel's analytic dL/dx must match the central
// difference (L(x + h e_k) - L(x - h e_k)) / 2h on sampled elements k of every input.
//
// Tolerance |num - ana| <= 1e-2 |ana| + 2e-3, from the error budget of h = 1e-2 in fp32: the
// truncation error h^2 f''' / 6 is ~1e-5 for these O(1) functions and the rounding noise of L
// (a few hundred fp32 outputs, summed in double) over 2h is ~1e-4. A wrong term, a missing
// scale or a transposed index moves the derivative by O(1) and fails by orders of magnitude.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
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

// Runs `run` (a kernel's outputs, concatenated) on pools of 1 and 3 workers: the same bits.
void ExpectSameForPoolSizes(const std::string& what,
                            const std::function<std::vector<float>(WorkerPool&)>& run) {
  WorkerPool one(std::vector<int>(1, 0), nullptr, "p1"),
      three(std::vector<int>(3, 0), nullptr, "p3");
  EXPECT_EQ(run(one), run(three)) << what;
}

// Finite differences of an elementwise activation on 37 values of N(0, 2^2): back(d, x, out) turns
// the upstream weights d into dL/dx in place (x the input, out the forward's output).
void CheckActivation(WorkerPool& pool, std::mt19937& rng, const std::string& what,
                     void (*forward)(WorkerPool&, float*, const float*, std::size_t),
                     const std::function<void(float*, const float*, const float*)>& back) {
  const std::size_t n = 37;
  auto x = Random(n, rng, 2.f), w = Random(n, rng);
  std::vector<float> out(n);
  auto loss = [&] {
    forward(pool, out.data(), x.data(), n);
    return Weighted(out, w);
  };
  loss();
  std::vector<float> d(w);
  back(d.data(), x.data(), out.data());
  CheckGrad(what, x, d, loss, n);
}

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

// BERT's embeddings: out = (wte[inp] + wtt[types]) + wpe[t] in BertEmbeddings' order, bit for bit;
// dwtt is written like dwpe (a row no position uses, row 2 here, comes back zero) and added to
// with accumulate; the typeless call gives the typeless bits; every pool size the same bits.
TEST_F(FiniteDifference, EncoderWithTokenTypes) {
  const int B = 2, T = 5, C = 12, V = 7, NTT = 3;
  std::vector<int> inp = {1, 3, 3, 0, 6, 2, 3, 1, 1, 5}, types = {0, 0, 1, 1, 1, 0, 1, 1, 0, 0};
  auto wte = Random(V * C, rng_), wpe = Random(T * C, rng_), wtt = Random(NTT * C, rng_),
       w = Random(B * T * C, rng_);
  std::vector<float> out(B * T * C);
  auto loss = [&] {
    EncoderForward(pool_, out.data(), inp.data(), wte.data(), wpe.data(), B, T, C, types.data(),
                   wtt.data());
    return Weighted(out, w);
  };
  loss();
  for (int i = 0; i < B * T; ++i) {
    for (int c = 0; c < C; ++c) {
      const float want = (wte[inp[i] * C + c] + wtt[types[i] * C + c]) + wpe[(i % T) * C + c];
      ASSERT_EQ(out[i * C + c], want) << i << "," << c;
    }
  }
  std::vector<float> dwte(V * C, 0.f), dwpe(T * C, -1.f), dwtt(NTT * C, -1.f);
  EncoderBackward(pool_, dwte.data(), dwpe.data(), w.data(), inp.data(), B, T, C, false,
                  types.data(), dwtt.data(), NTT);
  for (int c = 0; c < C; ++c) ASSERT_EQ(dwtt[2 * C + c], 0.f) << c;
  // accumulate adds: from zero, the written sums exactly; from them, twice them
  std::vector<float> dwte2(V * C, 0.f), dwpe2(T * C, 0.f), dwtt2(NTT * C, 0.f);
  EncoderBackward(pool_, dwte2.data(), dwpe2.data(), w.data(), inp.data(), B, T, C, true,
                  types.data(), dwtt2.data(), NTT);
  EXPECT_EQ(dwtt2, dwtt);
  EncoderBackward(pool_, dwte2.data(), dwpe2.data(), w.data(), inp.data(), B, T, C, true,
                  types.data(), dwtt2.data(), NTT);
  for (int i = 0; i < NTT * C; ++i)
    ASSERT_NEAR(dwtt2[i], 2 * dwtt[i], 1e-6 * std::fabs(dwtt[i])) << i;
  // no types: the typeless kernel's bits
  std::vector<float> plain(B * T * C), typeless(B * T * C), dwte_a(V * C, 0.f), dwte_b(V * C, 0.f),
      dwpe_a(T * C), dwpe_b(T * C);
  EncoderForward(pool_, plain.data(), inp.data(), wte.data(), wpe.data(), B, T, C);
  EncoderForward(pool_, typeless.data(), inp.data(), wte.data(), wpe.data(), B, T, C, nullptr,
                 nullptr);
  EXPECT_EQ(plain, typeless);
  for (int i = 0; i < B * T; ++i)
    for (int c = 0; c < C; ++c)
      ASSERT_EQ(plain[i * C + c], wte[inp[i] * C + c] + wpe[(i % T) * C + c]);
  EncoderBackward(pool_, dwte_a.data(), dwpe_a.data(), w.data(), inp.data(), B, T, C);
  EncoderBackward(pool_, dwte_b.data(), dwpe_b.data(), w.data(), inp.data(), B, T, C, false,
                  nullptr, nullptr, NTT);
  EXPECT_EQ(dwte_a, dwte_b);
  EXPECT_EQ(dwpe_a, dwpe_b);
  ExpectSameForPoolSizes("token-type encoder", [&](WorkerPool& pool) {
    std::vector<float> o(B * T * C), dte(V * C, 0.f), dpe(T * C), dtt(NTT * C);
    EncoderForward(pool, o.data(), inp.data(), wte.data(), wpe.data(), B, T, C, types.data(),
                   wtt.data());
    EncoderBackward(pool, dte.data(), dpe.data(), w.data(), inp.data(), B, T, C, false,
                    types.data(), dtt.data(), NTT);
    for (const auto* v : {&dte, &dpe, &dtt}) o.insert(o.end(), v->begin(), v->end());
    return o;
  });
  CheckGrad("dwte", wte, dwte, loss, 84);
  CheckGrad("dwpe", wpe, dwpe, loss, 60);
  CheckGrad("dwtt", wtt, dwtt, loss, NTT * C);
}

// wpe == nullptr (Llama: positions come from RoPE): out is the wte rows, no dwpe.
TEST_F(FiniteDifference, EncoderWithoutPositions) {
  const int B = 2, T = 5, C = 12, V = 7;
  std::vector<int> inp = {1, 3, 3, 0, 6, 2, 3, 1, 1, 5};
  auto wte = Random(V * C, rng_), w = Random(B * T * C, rng_);
  std::vector<float> out(B * T * C);
  auto loss = [&] {
    EncoderForward(pool_, out.data(), inp.data(), wte.data(), nullptr, B, T, C);
    return Weighted(out, w);
  };
  loss();
  for (int i = 0; i < B * T; ++i)
    for (int c = 0; c < C; ++c) ASSERT_EQ(out[i * C + c], wte[inp[i] * C + c]) << i << "," << c;
  std::vector<float> dwte(V * C, 0.f);
  EncoderBackward(pool_, dwte.data(), nullptr, w.data(), inp.data(), B, T, C);
  CheckGrad("dwte", wte, dwte, loss, 84);
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
  // eps: GPT-2's 1e-5 unless given (BERT's is 1e-12); rstd = 1/sqrt(var + eps).
  for (float eps : {1e-5f, 1e-12f, 0.5f}) {
    std::vector<float> o(N * C), m(N), r(N);
    LayerNormForward(pool_, o.data(), m.data(), r.data(), x.data(), wt.data(), bs.data(), N, C,
                     eps);
    for (std::size_t n = 0; n < N; ++n) {
      double mu = 0, var = 0;
      for (int c = 0; c < C; ++c) mu += double(x[n * C + c]) / C;
      for (int c = 0; c < C; ++c) var += (x[n * C + c] - mu) * (x[n * C + c] - mu) / C;
      ASSERT_NEAR(r[n], 1 / std::sqrt(var + eps), 1e-6 * r[n]) << eps;
    }
    if (eps == 1e-5f) {  // the default
      loss();
      EXPECT_EQ(o, out);
    }
  }
}

TEST_F(FiniteDifference, RmsNorm) {
  const std::size_t N = 6;
  const int C = 13;  // not a multiple of 8: exercises the vector tails
  const float eps = 1e-5f;
  auto x = Random(N * C, rng_, 2.f), wt = Random(C, rng_), w = Random(N * C, rng_);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] += 0.5f;
  std::vector<float> out(N * C), rstd(N);
  auto loss = [&] {
    RmsNormForward(pool_, out.data(), rstd.data(), x.data(), wt.data(), N, C, eps);
    return Weighted(out, w);
  };
  loss();
  for (std::size_t n = 0; n < N; ++n) {  // weight * x / sqrt(mean(x^2) + eps), in double
    double ms = 0;
    for (int c = 0; c < C; ++c) ms += double(x[n * C + c]) * x[n * C + c] / C;
    const double r = 1 / std::sqrt(ms + eps);
    ASSERT_NEAR(rstd[n], r, 1e-6 * r);
    for (int c = 0; c < C; ++c) {
      const double want = double(wt[c]) * x[n * C + c] * r;
      ASSERT_NEAR(out[n * C + c], want, 1e-6 * (1 + std::fabs(want))) << n << "," << c;
    }
  }
  // dinp adds to what is there (the residual stream's gradient); dweight is written.
  const auto before = Random(N * C, rng_);
  std::vector<float> dx(before), dw(C, -7.f);
  RmsNormBackward(pool_, dx.data(), dw.data(), w.data(), x.data(), wt.data(), rstd.data(), N, C);
  // accumulate adds dweight to what is there: the same sums, added once
  const auto start = Random(C, rng_);
  std::vector<float> acc(start), dx2(N * C, 0.f);
  RmsNormBackward(pool_, dx2.data(), acc.data(), w.data(), x.data(), wt.data(), rstd.data(), N, C,
                  true);
  for (int c = 0; c < C; ++c) ASSERT_EQ(acc[c], start[c] + dw[c]) << c;
  for (std::size_t i = 0; i < dx.size(); ++i)
    ASSERT_NEAR(dx[i], before[i] + dx2[i], 1e-6 * (std::fabs(before[i]) + std::fabs(dx2[i]))) << i;
  ExpectSameForPoolSizes("rmsnorm", [&](WorkerPool& pool) {
    std::vector<float> o(N * C), r(N), di(N * C, 0.f), dwt(C);
    RmsNormForward(pool, o.data(), r.data(), x.data(), wt.data(), N, C, eps);
    RmsNormBackward(pool, di.data(), dwt.data(), w.data(), x.data(), wt.data(), r.data(), N, C);
    o.insert(o.end(), di.begin(), di.end());
    o.insert(o.end(), dwt.begin(), dwt.end());
    return o;
  });
  CheckGrad("dinp", x, dx2, loss, 78);
  CheckGrad("dweight", wt, dw, loss, C);
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

// Attention in double, from the definition: qkv (B,T,(NH+2*NKV)*hs), query head h attends with
// key/value head h / (NH/NKV) (transformers' repeat_kv) to keys [0, t] (causal; with opt.window
// W only (t - W, t]) or [0, kv_len[b]) (opt.kv_len), the scores scaled by opt.scale (0:
// 1/sqrt(hs)), and with opt.dropout the probabilities are dropped (DropoutKeep at
// ((b*NH + h)*T + t)*T + s past the offset, kept ones over 1-p) before they weight v.
// out (B,T,NH*hs), att (B,NH,T,T) the undropped probabilities.
struct ReferenceAttention {
  std::vector<double> out, att;
  ReferenceAttention(const std::vector<float>& qkv, int B, int T, int NH, int NKV, int hs,
                     const AttentionOptions& opt = {})
      : out(std::size_t(B) * T * NH * hs, 0.0), att(std::size_t(B) * NH * T * T, 0.0) {
    const int R = (NH + 2 * NKV) * hs, C = NH * hs;
    for (int b = 0; b < B; ++b) {
      for (int h = 0; h < NH; ++h) {
        const int g = h / (NH / NKV);
        auto at = [&](int t, int off) { return double(qkv[(std::size_t(b) * T + t) * R + off]); };
        for (int t = 0; t < T; ++t) {
          const int last = opt.kv_len ? opt.kv_len[b] - 1 : t;
          const int first = opt.window > 0 ? std::max(0, t - opt.window + 1) : 0;
          const double scale = opt.scale > 0 ? double(opt.scale) : 1 / std::sqrt(double(hs));
          double* p = &att[((std::size_t(b) * NH + h) * T + t) * T];
          double mx = -1e300, sum = 0;
          for (int j = first; j <= last; ++j) {
            for (int d = 0; d < hs; ++d) p[j] += at(t, h * hs + d) * at(j, (NH + g) * hs + d);
            p[j] *= scale;
            mx = std::max(mx, p[j]);
          }
          for (int j = first; j <= last; ++j) sum += (p[j] = std::exp(p[j] - mx));
          for (int j = first; j <= last; ++j) {
            p[j] /= sum;
            const uint64_t index = opt.dropout_offset + ((uint64_t(b) * NH + h) * T + t) * T + j;
            const double pd = opt.dropout == 0.f ? p[j]
                              : DropoutKeep(opt.dropout_seed, index, opt.dropout)
                                  ? p[j] / (1.0 - opt.dropout)
                                  : 0.0;
            for (int d = 0; d < hs; ++d)
              out[(std::size_t(b) * T + t) * C + h * hs + d] += pd * at(j, (NH + NKV + g) * hs + d);
          }
        }
      }
    }
  }
};

// One attention case (options `opt`): random qkv (B,T,(NH+2*NKV)*hs) and upstream weights w; the
// forward (Loss() reruns it: the weighted sum of out) checked against ReferenceAttention (out
// within 1e-5, att within 1e-6; att set to -5 first, so an unwritten probability shows); the
// backward's dqkv (-9 first: every element written); the same bits on pools of 1 and 3 workers.
struct AttentionCase {
  int B, T, NH, NKV, hs, C;
  std::size_t R;
  AttentionOptions opt;
  std::vector<float> qkv, w, out, att, dqkv;
  AttentionCase(int B_, int T_, int NH_, int NKV_, int hs_, const AttentionOptions& opt_,
                std::mt19937& rng)
      : B(B_),
        T(T_),
        NH(NH_),
        NKV(NKV_),
        hs(hs_),
        C(NH_ * hs_),
        R(std::size_t(NH_ + 2 * NKV_) * hs_),
        opt(opt_),
        qkv(Random(std::size_t(B_) * T_ * R, rng)),
        w(Random(std::size_t(B_) * T_ * C, rng)),
        out(std::size_t(B_) * T_ * C),
        att(std::size_t(B_) * NH_ * T_ * T_, -5.f),
        dqkv(qkv.size(), -9.f) {}
  double Loss(WorkerPool& pool) {
    AttentionForward(pool, out.data(), att.data(), qkv.data(), B, T, C, NH, NKV, opt);
    return Weighted(out, w);
  }
  // Runs the forward and the backward, and checks the forward against the reference.
  void RunAndCheck(WorkerPool& pool) {
    Loss(pool);
    const ReferenceAttention ref(qkv, B, T, NH, NKV, hs, opt);
    for (std::size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], ref.out[i], 1e-5) << i;
    for (std::size_t i = 0; i < att.size(); ++i) ASSERT_NEAR(att[i], ref.att[i], 1e-6) << i;
    std::vector<float> scratch(AttentionScratchFloats(pool.size(), T));
    AttentionBackward(pool, dqkv.data(), scratch.data(), w.data(), qkv.data(), att.data(), B, T, C,
                      NH, NKV, opt);
  }
  void ExpectSameForPoolSizes(const std::string& what) const {
    ::cputrain::kernels::ExpectSameForPoolSizes(what, [&](WorkerPool& pool) {
      std::vector<float> o(out.size()), a(att.size()), d(dqkv.size()),
          sc(AttentionScratchFloats(pool.size(), T));
      AttentionForward(pool, o.data(), a.data(), qkv.data(), B, T, C, NH, NKV, opt);
      AttentionBackward(pool, d.data(), sc.data(), w.data(), qkv.data(), a.data(), B, T, C, NH, NKV,
                        opt);
      o.insert(o.end(), a.begin(), a.end());
      o.insert(o.end(), d.begin(), d.end());
      return o;
    });
  }
  void CheckGradients(WorkerPool& pool, int samples) {
    CheckGrad(
        "dqkv", qkv, dqkv, [&] { return Loss(pool); }, samples);
  }
};

// Grouped-query attention (NKV = NH/2, one key/value head for all) and multi-head (NKV = NH, also
// spelt NKV = 0): forward against the reference, backward by finite differences, where dk and dv
// sum the contributions of the query heads sharing a key/value head; one task runs on one worker,
// so every pool size gives the same bits.
TEST_F(FiniteDifference, GroupedQueryAttention) {
  const int B = 2, T = 7, NH = 4, hs = 4, C = NH * hs;
  for (int NKV : {4, 2, 1}) {
    SCOPED_TRACE("NKV " + std::to_string(NKV));
    const std::size_t R = std::size_t(NH + 2 * NKV) * hs;
    auto qkv = Random(B * T * R, rng_), w = Random(B * T * C, rng_);
    std::vector<float> out(B * T * C), att(B * NH * T * T);
    auto loss = [&] {
      AttentionForward(pool_, out.data(), att.data(), qkv.data(), B, T, C, NH, NKV);
      return Weighted(out, w);
    };
    loss();
    const ReferenceAttention ref(qkv, B, T, NH, NKV, hs);
    for (std::size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], ref.out[i], 1e-5) << i;
    for (std::size_t i = 0; i < att.size(); ++i) ASSERT_NEAR(att[i], ref.att[i], 1e-6) << i;
    std::vector<float> dqkv(qkv.size(), -9.f), scratch(AttentionScratchFloats(pool_.size(), T));
    AttentionBackward(pool_, dqkv.data(), scratch.data(), w.data(), qkv.data(), att.data(), B, T, C,
                      NH, NKV);
    if (NKV == NH) {  // 0 means NH: the same call
      std::vector<float> out0(out.size()), att0(att.size()), dqkv0(dqkv.size());
      AttentionForward(pool_, out0.data(), att0.data(), qkv.data(), B, T, C, NH);
      AttentionBackward(pool_, dqkv0.data(), scratch.data(), w.data(), qkv.data(), att.data(), B, T,
                        C, NH);
      EXPECT_EQ(out0, out);
      EXPECT_EQ(att0, att);
      EXPECT_EQ(dqkv0, dqkv);
    }
    ExpectSameForPoolSizes("attention", [&](WorkerPool& pool) {
      std::vector<float> o(out.size()), a(att.size()), d(dqkv.size()),
          sc(AttentionScratchFloats(pool.size(), T));
      AttentionForward(pool, o.data(), a.data(), qkv.data(), B, T, C, NH, NKV);
      AttentionBackward(pool, d.data(), sc.data(), w.data(), qkv.data(), a.data(), B, T, C, NH,
                        NKV);
      o.insert(o.end(), a.begin(), a.end());
      o.insert(o.end(), d.begin(), d.end());
      return o;
    });
    CheckGrad("dqkv", qkv, dqkv, loss, 150);
  }
  std::vector<float> qkv(B * T * 7 * hs), out(B * T * C), att(B * NH * T * T);
  EXPECT_THROW(AttentionForward(pool_, out.data(), att.data(), qkv.data(), B, T, C, NH, 3),
               RuntimeError);  // 3 does not divide 4
}

// BERT's attention: bidirectional over each row's first kv_len keys (Hugging Face's right-padded
// attention_mask), padded query rows computed like the others, with and without dropout of the
// probabilities. Row b = 0 attends to all T keys, b = 1 to 5, b = 2 to 1 (a lone [CLS]).
// Forward against the double reference; att exactly zero on masked keys; backward by finite
// differences of every input (the dropout mask is a fixed function of its index, so the loss is
// smooth); masked keys get dk = dv = 0 exactly; every pool size the same bits.
TEST_F(FiniteDifference, BidirectionalAttention) {
  const int B = 3, T = 9, NH = 4, hs = 4, C = NH * hs;
  const std::vector<int> kv_len = {T, 5, 1};
  for (float dropout : {0.f, 0.3f}) {
    for (int NKV : {4, 2}) {
      SCOPED_TRACE("dropout " + std::to_string(dropout) + " NKV " + std::to_string(NKV));
      AttentionOptions opt;
      opt.kv_len = kv_len.data();
      opt.dropout = dropout;
      opt.dropout_seed = 77;
      opt.dropout_offset = 1000;
      AttentionCase c(B, T, NH, NKV, hs, opt, rng_);
      c.RunAndCheck(pool_);
      for (std::size_t i = 0; i < c.att.size(); ++i) {
        if (i % T >= std::size_t(kv_len[i / (NH * T * T)])) {
          ASSERT_EQ(c.att[i], 0.f) << i;
        }
      }
      for (int b = 0; b < B; ++b) {
        for (int s = kv_len[b]; s < T; ++s) {
          for (std::size_t ch = std::size_t(NH) * hs; ch < c.R; ++ch)
            ASSERT_EQ(c.dqkv[(std::size_t(b) * T + s) * c.R + ch], 0.f) << b << "," << s;
        }
      }
      c.ExpectSameForPoolSizes("bidirectional attention");
      c.CheckGradients(pool_, 200);
    }
  }
  std::vector<float> qkv(B * T * 3 * C), out(B * T * C), att(B * NH * T * T);
  for (const std::vector<int>& bad : {std::vector<int>{T, 0, 1}, std::vector<int>{T + 1, 5, 1}}) {
    AttentionOptions opt;
    opt.kv_len = bad.data();
    EXPECT_THROW(AttentionForward(pool_, out.data(), att.data(), qkv.data(), B, T, C, NH, 0, opt),
                 RuntimeError);
  }
}

// Dropout on the causal path too (the options are independent), and the options' defaults are
// the causal kernel exactly: kv_len null and dropout 0 whatever the seed give the same bits.
TEST_F(FiniteDifference, CausalAttentionDropout) {
  const int B = 2, T = 7, NH = 4, hs = 4, C = NH * hs, NKV = 2;
  const std::size_t R = std::size_t(NH + 2 * NKV) * hs;
  auto qkv = Random(B * T * R, rng_), w = Random(B * T * C, rng_);
  std::vector<float> out(B * T * C), att(B * NH * T * T),
      scratch(AttentionScratchFloats(pool_.size(), T));
  AttentionOptions none;
  none.dropout_seed = 5;
  none.dropout_offset = 99;
  std::vector<float> out0(out), att0(att), d0(qkv.size()), d1(qkv.size());
  AttentionForward(pool_, out0.data(), att0.data(), qkv.data(), B, T, C, NH, NKV);
  AttentionBackward(pool_, d0.data(), scratch.data(), w.data(), qkv.data(), att0.data(), B, T, C,
                    NH, NKV);
  AttentionForward(pool_, out.data(), att.data(), qkv.data(), B, T, C, NH, NKV, none);
  AttentionBackward(pool_, d1.data(), scratch.data(), w.data(), qkv.data(), att.data(), B, T, C, NH,
                    NKV, none);
  EXPECT_EQ(out, out0);
  EXPECT_EQ(att, att0);
  EXPECT_EQ(d1, d0);
  AttentionOptions opt;
  opt.dropout = 0.25f;
  opt.dropout_seed = 3;
  auto loss = [&] {
    AttentionForward(pool_, out.data(), att.data(), qkv.data(), B, T, C, NH, NKV, opt);
    return Weighted(out, w);
  };
  loss();
  EXPECT_EQ(att, att0);  // att keeps the undropped probabilities
  const ReferenceAttention ref(qkv, B, T, NH, NKV, hs, opt);
  for (std::size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], ref.out[i], 1e-5) << i;
  std::vector<float> dqkv(qkv.size());
  AttentionBackward(pool_, dqkv.data(), scratch.data(), w.data(), qkv.data(), att.data(), B, T, C,
                    NH, NKV, opt);
  CheckGrad("dqkv", qkv, dqkv, loss, 150);
}

// Rows longer than the 64-row blocks and than the fp32 dropped product's stack buffer holds at
// once (16K floats: 54 rows of 300), with dropout: forward against the reference, backward by
// finite differences on a sample.
TEST_F(FiniteDifference, BidirectionalAttentionLongRows) {
  const int B = 2, T = 300, NH = 2, hs = 4, C = NH * hs;
  const std::vector<int> kv_len = {T, 231};
  AttentionOptions opt;
  opt.kv_len = kv_len.data();
  opt.dropout = 0.1f;
  opt.dropout_seed = 12;
  auto qkv = Random(B * T * 3 * C, rng_), w = Random(B * T * C, rng_);
  std::vector<float> out(B * T * C), att(std::size_t(B) * NH * T * T);
  auto loss = [&] {
    AttentionForward(pool_, out.data(), att.data(), qkv.data(), B, T, C, NH, 0, opt);
    return Weighted(out, w);
  };
  loss();
  const ReferenceAttention ref(qkv, B, T, NH, NH, hs, opt);
  for (std::size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], ref.out[i], 1e-5) << i;
  for (std::size_t i = 0; i < att.size(); ++i) ASSERT_NEAR(att[i], ref.att[i], 1e-6) << i;
  std::vector<float> dqkv(qkv.size()), scratch(AttentionScratchFloats(pool_.size(), T));
  AttentionBackward(pool_, dqkv.data(), scratch.data(), w.data(), qkv.data(), att.data(), B, T, C,
                    NH, 0, opt);
  CheckGrad("dqkv", qkv, dqkv, loss, 60);
}

// Decoding one position against a KV cache is the forward's row for that position: the cache
// here is the keys and values inside qkv itself (row stride ld = (NH+2*NKV)*hs), the query row t's.
// Sliding-window attention (Mistral, Gemma 3's local layers, Qwen2's windowed layers): row t
// attends keys (t - W, t] only, with the family's own score scale (Gemma's
// query_pre_attn_scalar^-1/2), for windows shorter than T, of 1, and at least T (then exactly the
// causal kernel, bit for bit). Forward against the double reference; att exactly zero outside
// the window; backward by finite differences; keys no query sees in its window get dk = dv = 0;
// every pool size the same bits; windows with dropout.
TEST_F(FiniteDifference, SlidingWindowAttention) {
  const int B = 2, T = 11, NH = 4, hs = 4;
  const struct {
    int window;
    float scale;
    int NKV;
  } kCases[] = {{3, 0.3f, 2}, {1, 0.f, 4}, {T, 0.f, 2}, {T + 5, 0.3f, 4}};
  for (const auto& [window, scale, NKV] : kCases) {
    SCOPED_TRACE("window " + std::to_string(window) + " scale " + std::to_string(scale) + " NKV " +
                 std::to_string(NKV));
    AttentionOptions opt;
    opt.window = window;
    opt.scale = scale;
    AttentionCase c(B, T, NH, NKV, hs, opt, rng_);
    c.RunAndCheck(pool_);
    for (std::size_t i = 0; i < c.att.size(); ++i) {
      const int t = int(i / T % T), s = int(i % T);
      if (s > t || t - s >= window) {
        ASSERT_EQ(c.att[i], 0.f) << i;
      }
    }
    if (window >= T && scale == 0.f) {  // no window at all: the causal kernel's bits
      AttentionCase causal = c;
      causal.opt = {};
      causal.RunAndCheck(pool_);
      EXPECT_EQ(causal.out, c.out);
      EXPECT_EQ(causal.att, c.att);
      EXPECT_EQ(causal.dqkv, c.dqkv);
    }
    c.ExpectSameForPoolSizes("windowed attention");
    c.CheckGradients(pool_, 100);
  }
  // With dropout: the reference's mask, and finite differences.
  AttentionOptions opt;
  opt.window = 4;
  opt.dropout = 0.25f;
  opt.dropout_seed = 5;
  AttentionCase c(B, T, NH, 2, hs, opt, rng_);
  c.RunAndCheck(pool_);
  c.CheckGradients(pool_, 100);
  // A window is causal attention's: with kv_len it is refused.
  const std::vector<int> kv_len = {T, T};
  c.opt.kv_len = kv_len.data();
  EXPECT_THROW(c.Loss(pool_), RuntimeError);
}

// Decoding through a window: the new position attends to the cache rows of its window (the
// caller passes them), with the family's scale: the windowed forward's row, every position.
TEST_F(FiniteDifference, AttentionDecodeInAWindow) {
  const int B = 1, T = 19, NH = 4, NKV = 2, hs = 8, C = NH * hs, R = (NH + 2 * NKV) * hs;
  AttentionOptions opt;
  opt.window = 5;
  opt.scale = 0.2f;
  const auto qkv = Random(std::size_t(B) * T * R, rng_);
  std::vector<float> out(B * T * C), att(B * NH * T * T);
  AttentionForward(pool_, out.data(), att.data(), qkv.data(), B, T, C, NH, NKV, opt);
  for (int t = 0; t < T; ++t) {
    const int first = std::max(0, t - opt.window + 1);
    std::vector<float> y(C), scratch(std::size_t(pool_.size()) * T);
    const float* row0 = qkv.data() + std::size_t(first) * R;
    AttentionDecode(pool_, y.data(), scratch.data(), qkv.data() + std::size_t(t) * R,
                    row0 + NH * hs, row0 + (NH + NKV) * hs, t - first + 1, NH, NKV, hs, R,
                    opt.scale);
    for (int c = 0; c < C; ++c)
      ASSERT_NEAR(y[c], out[std::size_t(t) * C + c], 1e-6) << t << "," << c;
  }
}

// Gemma's RMSNorm, (x * rstd) * (1 + weight): the forward in double, the backward by finite
// differences (the weight's gradient is the same as without the offset: d(1 + w)/dw = 1), pool
// sizes; offset 0 is the plain RMSNorm bit for bit.
TEST_F(FiniteDifference, RmsNormPlusOne) {
  const std::size_t N = 6;
  const int C = 13;
  const float eps = 1e-6f;
  auto x = Random(N * C, rng_, 2.f), wt = Random(C, rng_, 0.2f), w = Random(N * C, rng_);
  std::vector<float> out(N * C), rstd(N);
  auto loss = [&] {
    RmsNormForward(pool_, out.data(), rstd.data(), x.data(), wt.data(), N, C, eps, 1.f);
    return Weighted(out, w);
  };
  loss();
  for (std::size_t n = 0; n < N; ++n) {
    double ms = 0;
    for (int c = 0; c < C; ++c) ms += double(x[n * C + c]) * x[n * C + c] / C;
    const double r = 1 / std::sqrt(ms + eps);
    for (int c = 0; c < C; ++c) {
      const double want = (1.0 + wt[c]) * x[n * C + c] * r;
      ASSERT_NEAR(out[n * C + c], want, 1e-6 * (1 + std::fabs(want))) << n << "," << c;
    }
  }
  std::vector<float> dx(N * C, 0.f), dw(C);
  RmsNormBackward(pool_, dx.data(), dw.data(), w.data(), x.data(), wt.data(), rstd.data(), N, C,
                  false, 1.f);
  CheckGrad("dinp", x, dx, loss, 78);
  CheckGrad("dweight", wt, dw, loss, C);
  std::vector<float> o0(N * C), o1(N * C), r0(N), r1(N), d0(N * C, 0.f), d1(N * C, 0.f), w0(C),
      w1(C);
  RmsNormForward(pool_, o0.data(), r0.data(), x.data(), wt.data(), N, C, eps);
  RmsNormForward(pool_, o1.data(), r1.data(), x.data(), wt.data(), N, C, eps, 0.f);
  RmsNormBackward(pool_, d0.data(), w0.data(), w.data(), x.data(), wt.data(), r0.data(), N, C);
  RmsNormBackward(pool_, d1.data(), w1.data(), w.data(), x.data(), wt.data(), r0.data(), N, C,
                  false, 0.f);
  EXPECT_EQ(o0, o1);
  EXPECT_EQ(d0, d1);
  EXPECT_EQ(w0, w1);
  ExpectSameForPoolSizes("rmsnorm (1 + w)", [&](WorkerPool& pool) {
    std::vector<float> o(N * C), r(N), di(N * C, 0.f), dwt(C);
    RmsNormForward(pool, o.data(), r.data(), x.data(), wt.data(), N, C, eps, 1.f);
    RmsNormBackward(pool, di.data(), dwt.data(), w.data(), x.data(), wt.data(), r.data(), N, C,
                    false, 1.f);
    o.insert(o.end(), di.begin(), di.end());
    o.insert(o.end(), dwt.begin(), dwt.end());
    return o;
  });
}

// q/k RMSNorm per head (Qwen3, Gemma 3), in place on qkv: each query head normalized with wq,
// each key head with wk, values untouched; with Gemma's (1 + w) too. Forward in double; backward
// (d(in) written in place, dwq and dwk written or accumulated) by finite differences; pool sizes.
TEST_F(FiniteDifference, QkNorm) {
  const std::size_t N = 5;
  const int NH = 4, NKV = 2, hs = 12;  // hs: not a multiple of 8
  const std::size_t R = std::size_t(NH + 2 * NKV) * hs, H = NH + NKV;
  const float eps = 1e-6f;
  for (float offset : {0.f, 1.f}) {
    SCOPED_TRACE("offset " + std::to_string(offset));
    auto x = Random(N * R, rng_, 2.f), wq = Random(hs, rng_), wk = Random(hs, rng_),
         w = Random(N * R, rng_);
    std::vector<float> y(N * R), saved(N * H * hs), rstd(N * H);
    auto loss = [&] {
      y = x;
      QkNormForward(pool_, y.data(), saved.data(), rstd.data(), wq.data(), wk.data(), N, NH, NKV,
                    hs, eps, offset);
      return Weighted(y, w);
    };
    loss();
    for (std::size_t n = 0; n < N; ++n) {
      for (std::size_t h = 0; h < std::size_t(NH + 2 * NKV); ++h) {
        const float* in = &x[n * R + h * hs];
        const float* o = &y[n * R + h * hs];
        double ms = 0;
        for (int c = 0; c < hs; ++c) ms += double(in[c]) * in[c] / hs;
        const double r = 1 / std::sqrt(ms + eps);
        for (int c = 0; c < hs; ++c) {
          if (h >= H) {  // values
            ASSERT_EQ(o[c], in[c]);
            continue;
          }
          const double want = (offset + (h < std::size_t(NH) ? wq[c] : wk[c])) * in[c] * r;
          ASSERT_NEAR(o[c], want, 1e-6 * (1 + std::fabs(want))) << n << "," << h << "," << c;
        }
      }
    }
    std::vector<float> d(w), dwq(hs, -7.f), dwk(hs, -7.f);
    QkNormBackward(pool_, d.data(), dwq.data(), dwk.data(), saved.data(), rstd.data(), wq.data(),
                   wk.data(), N, NH, NKV, hs, offset);
    CheckGrad("dqkv", x, d, loss, 120);
    CheckGrad("dwq", wq, dwq, loss, hs);
    CheckGrad("dwk", wk, dwk, loss, hs);
    for (std::size_t n = 0; n < N; ++n)  // the values' gradient: dout, untouched
      for (std::size_t c = H * hs; c < R; ++c) ASSERT_EQ(d[n * R + c], w[n * R + c]);
    std::vector<float> d2(w), aq(dwq), ak(dwk);
    QkNormBackward(pool_, d2.data(), aq.data(), ak.data(), saved.data(), rstd.data(), wq.data(),
                   wk.data(), N, NH, NKV, hs, offset, /*accumulate=*/true);
    for (int c = 0; c < hs; ++c) {
      ASSERT_EQ(aq[c], dwq[c] + dwq[c]);
      ASSERT_EQ(ak[c], dwk[c] + dwk[c]);
    }
    EXPECT_EQ(d2, d);
    ExpectSameForPoolSizes("qk norm", [&](WorkerPool& pool) {
      std::vector<float> o(x), s(saved.size()), r(rstd.size()), dd(w), gq(hs), gk(hs);
      QkNormForward(pool, o.data(), s.data(), r.data(), wq.data(), wk.data(), N, NH, NKV, hs, eps,
                    offset);
      QkNormBackward(pool, dd.data(), gq.data(), gk.data(), s.data(), r.data(), wq.data(),
                     wk.data(), N, NH, NKV, hs, offset);
      o.insert(o.end(), dd.begin(), dd.end());
      o.insert(o.end(), gq.begin(), gq.end());
      o.insert(o.end(), gk.begin(), gk.end());
      return o;
    });
  }
}

// GeGLU (Gemma's MLP): gelu_tanh(gate) * up in double, the backward by finite differences, gates
// far out of range finite, pool sizes.
TEST_F(FiniteDifference, Geglu) {
  const std::size_t N = 5;
  const int F = 13;
  auto gu = Random(N * 2 * F, rng_, 2.f), w = Random(N * F, rng_);
  gu[0] = -100.f;
  gu[1] = 100.f;
  std::vector<float> out(N * F);
  auto loss = [&] {
    GegluForward(pool_, out.data(), gu.data(), N, F);
    return Weighted(out, w);
  };
  loss();
  for (std::size_t n = 0; n < N; ++n) {
    for (int f = 0; f < F; ++f) {
      const double g = gu[n * 2 * F + f], u = gu[n * 2 * F + F + f];
      const double k = std::sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g);
      const double want = 0.5 * g * (1 + std::tanh(k)) * u;
      ASSERT_NEAR(out[n * F + f], want, 2e-6 * (1 + std::fabs(want))) << n << "," << f;
    }
  }
  std::vector<float> dgu(N * 2 * F, -9.f);
  GegluBackward(pool_, dgu.data(), gu.data(), w.data(), N, F);
  for (float v : dgu) ASSERT_TRUE(std::isfinite(v));
  ExpectSameForPoolSizes("geglu", [&](WorkerPool& pool) {
    std::vector<float> o(N * F), d(N * 2 * F);
    GegluForward(pool, o.data(), gu.data(), N, F);
    GegluBackward(pool, d.data(), gu.data(), w.data(), N, F);
    o.insert(o.end(), d.begin(), d.end());
    return o;
  });
  CheckGrad("dgu", gu, dgu, loss, 130);
}

TEST_F(FiniteDifference, AttentionDecodeIsTheForwardRow) {
  const int B = 2, T = 19, NH = 4, hs = 8, C = NH * hs;  // T: a softmax row's vector tail
  for (int NKV : {4, 2, 1}) {
    SCOPED_TRACE("NKV " + std::to_string(NKV));
    const int R = (NH + 2 * NKV) * hs;
    const auto qkv = Random(std::size_t(B) * T * R, rng_);
    std::vector<float> out(B * T * C), att(B * NH * T * T);
    AttentionForward(pool_, out.data(), att.data(), qkv.data(), B, T, C, NH, NKV);
    auto decode = [&](WorkerPool& pool, int b, int t) {
      std::vector<float> y(C), scratch(std::size_t(pool.size()) * (t + 1));
      const float* row0 = qkv.data() + std::size_t(b) * T * R;
      AttentionDecode(pool, y.data(), scratch.data(), row0 + std::size_t(t) * R, row0 + NH * hs,
                      row0 + (NH + NKV) * hs, t + 1, NH, NKV, hs, R);
      return y;
    };
    for (int b = 0; b < B; ++b) {
      for (int t = 0; t < T; ++t) {
        const auto y = decode(pool_, b, t);
        for (int c = 0; c < C; ++c) {
          const float want = out[(std::size_t(b) * T + t) * C + c];
          ASSERT_NEAR(y[c], want, 1e-6) << b << "," << t << "," << c;
        }
      }
    }
    ExpectSameForPoolSizes("decode", [&](WorkerPool& pool) { return decode(pool, 1, T - 1); });
  }
}

// RoPE's inverse frequencies in double, as transformers defines them
// (transformers.modeling_rope_utils: 1 / theta^(2i/hs); llama3: wavelengths 2 pi / inv_freq above
// original/low_freq_factor divided by factor, below original/high_freq_factor kept, between
// interpolated).
std::vector<double> ReferenceInvFreq(int hs, double theta, const RopeScaling& s) {
  std::vector<double> inv(hs / 2);
  for (int i = 0; i < hs / 2; ++i) {
    inv[i] = std::pow(theta, -2.0 * i / hs);
    if (s.kind == RopeScaling::kLinear) inv[i] /= s.factor;
    if (s.kind != RopeScaling::kLlama3) continue;
    const double wavelen = 2 * M_PI / inv[i], orig = s.original_max_position;
    if (wavelen > orig / s.low_freq_factor) {
      inv[i] /= s.factor;
    } else if (wavelen >= orig / s.high_freq_factor) {
      const double smooth =
          (orig / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      inv[i] = (1 - smooth) * inv[i] / s.factor + smooth * inv[i];
    }
  }
  return inv;
}

RopeScaling Llama31Scaling() {  // Llama 3.1's rope_scaling
  RopeScaling s;
  s.kind = RopeScaling::kLlama3;
  s.factor = 8;
  s.low_freq_factor = 1;
  s.high_freq_factor = 4;
  s.original_max_position = 8192;
  return s;
}

TEST_F(FiniteDifference, RopeTablesMatchTransformers) {
  // Llama 3.1 8B: head_dim 128, theta 500000, llama3 scaling. The values below are transformers
  // 4.55.4's (torch 2.8.0, CPU), printed with %.9g from
  //   LlamaRotaryEmbedding(LlamaConfig(hidden_size=4096, num_attention_heads=32, rope_theta=5e5,
  //       rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
  //       high_freq_factor=4.0, original_max_position_embeddings=8192)))(
  //       torch.zeros(1, 3, 128), torch.tensor([[1, 1000, 8191]]))
  // at [0, position, i]. Columns 29..34 are llama3's interpolated band, 40 and 63 its stretched
  // one. Same fp32 angles, so only torch's fp32 cos/sin (within an ulp) separate us: 1.2e-7.
  const int hs = 128, maxT = 8192, half = hs / 2;
  const RopeScaling llama3 = Llama31Scaling();
  std::vector<float> cos(std::size_t(maxT) * half), sin(cos.size());
  RopeTables(cos.data(), sin.data(), maxT, hs, 500000.f, llama3);
  const struct {
    int p, i;
    float cos, sin;
  } kTransformers[] = {
      {1, 0, 0.540302336f, 0.841470957f},
      {1, 1, 0.686146915f, 0.727463007f},
      {1, 29, 0.999997675f, 0.002166569f},
      {1, 31, 0.999999642f, 0.000856751343f},
      {1, 34, 1.f, 0.000178507791f},
      {1, 40, 1.f, 3.42810235e-05f},
      {1, 63, 1.f, 3.06892588e-07f},
      {1000, 0, 0.562379062f, 0.826879561f},
      {1000, 1, -0.585993946f, -0.81031543f},
      {1000, 29, -0.561149836f, 0.827714205f},
      {1000, 31, 0.654895902f, 0.755719066f},
      {1000, 34, 0.984109759f, 0.177561268f},
      {1000, 40, 0.999412477f, 0.0342743099f},
      {1000, 63, 0.99999994f, 0.000306892587f},
      {8191, 0, -0.646390498f, -0.763006806f},
      {8191, 1, 0.977398813f, -0.211403862f},
      {8191, 29, 0.450763315f, -0.892643511f},
      {8191, 31, 0.742188871f, 0.670190752f},
      {8191, 34, 0.108425386f, 0.994104564f},
      {8191, 40, 0.960835218f, 0.277120441f},
      {8191, 63, 0.999996841f, 0.00251375465f},
  };
  for (const auto& v : kTransformers) {
    EXPECT_NEAR(cos[std::size_t(v.p) * half + v.i], v.cos, 1.2e-7) << v.p << "," << v.i;
    EXPECT_NEAR(sin[std::size_t(v.p) * half + v.i], v.sin, 1.2e-7) << v.p << "," << v.i;
  }
  // Every entry, with and without scaling, against the exact angle p * inv_freq: fp32 inv_freq
  // (a few roundings) and the fp32 product move the angle by at most ~3e-7 of itself.
  RopeScaling linear;  // Gemma 3's global layers: every frequency over the factor
  linear.kind = RopeScaling::kLinear;
  linear.factor = 8;
  for (const RopeScaling& s : {RopeScaling{}, llama3, linear}) {
    const auto inv = ReferenceInvFreq(hs, 500000.0, s);
    RopeTables(cos.data(), sin.data(), maxT, hs, 500000.f, s);
    for (int p = 0; p < maxT; ++p) {
      for (int i = 0; i < half; ++i) {
        const double angle = p * inv[i], tol = 1e-7 + 5e-7 * angle;
        ASSERT_NEAR(cos[std::size_t(p) * half + i], std::cos(angle), tol) << p << "," << i;
        ASSERT_NEAR(sin[std::size_t(p) * half + i], std::sin(angle), tol) << p << "," << i;
      }
    }
  }
}

// RoPE forward against the rotation in double (hs = 16 at theta 500000 puts columns in all three
// of llama3's bands: kept, interpolated, stretched), at an offset pos0; RoPE is linear, and its
// backward must be the transpose: <R x, y> = <x, R^T y>. v and dv are not touched.
TEST_F(FiniteDifference, Rope) {
  const int B = 2, T = 5, NH = 4, NKV = 2, hs = 16, half = hs / 2, maxT = 128, pos0 = 100;
  const std::size_t R = std::size_t(NH + 2 * NKV) * hs, n = std::size_t(B) * T * R;
  const RopeScaling llama3 = Llama31Scaling();
  std::vector<float> cos(std::size_t(maxT) * half), sin(cos.size());
  RopeTables(cos.data(), sin.data(), maxT, hs, 500000.f, llama3);
  const auto inv = ReferenceInvFreq(hs, 500000.0, llama3);
  const auto x = Random(n, rng_), y = Random(n, rng_);
  std::vector<float> rx(x);
  RopeForward(pool_, rx.data(), cos.data(), sin.data(), B, T, NH, NKV, hs, pos0);
  for (std::size_t r = 0; r < std::size_t(B) * T; ++r) {
    const int p = pos0 + int(r % T);
    for (int h = 0; h < NH + 2 * NKV; ++h) {
      for (int i = 0; i < half; ++i) {
        const std::size_t at = r * R + h * hs + i;
        const double x1 = x[at], x2 = x[at + half], a = p * inv[i];
        if (h >= NH + NKV) {  // v
          ASSERT_EQ(rx[at], x[at]);
          ASSERT_EQ(rx[at + half], x[at + half]);
          continue;
        }
        const double tol = 1e-6 + 5e-7 * a * (std::fabs(x1) + std::fabs(x2));
        ASSERT_NEAR(rx[at], x1 * std::cos(a) - x2 * std::sin(a), tol) << r << "," << h << "," << i;
        ASSERT_NEAR(rx[at + half], x2 * std::cos(a) + x1 * std::sin(a), tol) << r << "," << h;
      }
    }
  }
  // The transpose, at positions 0..T-1 (backward's).
  std::vector<float> r0x(x), rty(y);
  RopeForward(pool_, r0x.data(), cos.data(), sin.data(), B, T, NH, NKV, hs);
  RopeBackward(pool_, rty.data(), cos.data(), sin.data(), B, T, NH, NKV, hs);
  double lhs = 0, rhs = 0, mag = 0;
  for (std::size_t i = 0; i < n; ++i) {
    lhs += double(r0x[i]) * y[i];
    rhs += double(x[i]) * rty[i];
    mag += std::fabs(double(x[i]) * y[i]);
  }
  EXPECT_NEAR(lhs, rhs, 1e-6 * mag);
  for (std::size_t r = 0; r < std::size_t(B) * T; ++r)
    for (std::size_t c = (NH + NKV) * hs; c < R; ++c) ASSERT_EQ(rty[r * R + c], y[r * R + c]);
  ExpectSameForPoolSizes("rope", [&](WorkerPool& pool) {
    std::vector<float> f(x), b(y);
    RopeForward(pool, f.data(), cos.data(), sin.data(), B, T, NH, NKV, hs, pos0);
    RopeBackward(pool, b.data(), cos.data(), sin.data(), B, T, NH, NKV, hs);
    f.insert(f.end(), b.begin(), b.end());
    return f;
  });
}

TEST_F(FiniteDifference, Gelu) {
  const std::size_t n = 37;
  const auto x = Random(n, rng_, 2.f);
  std::vector<float> out(n);
  GeluForward(pool_, out.data(), x.data(), n);
  // Spot values against the tanh formula.
  for (std::size_t i = 0; i < n; ++i) {
    const double u = std::sqrt(2.0 / M_PI) * (x[i] + 0.044715 * std::pow(x[i], 3));
    ASSERT_NEAR(out[i], 0.5 * x[i] * (1 + std::tanh(u)), 2e-6 * (1 + std::fabs(x[i])));
  }
  CheckActivation(pool_, rng_, "gelu", GeluForward, [&](float* d, const float* xs, const float*) {
    GeluBackward(pool_, d, xs, d, n);
  });
}

TEST_F(FiniteDifference, Swiglu) {
  const std::size_t N = 5;
  const int F = 13;  // a vector tail
  auto gu = Random(N * 2 * F, rng_, 2.f), w = Random(N * F, rng_);
  gu[0] = -100.f;  // gates far out: silu saturates to 0 and to the identity, no NaN
  gu[1] = 100.f;
  std::vector<float> out(N * F);
  auto loss = [&] {
    SwigluForward(pool_, out.data(), gu.data(), N, F);
    return Weighted(out, w);
  };
  loss();
  for (std::size_t n = 0; n < N; ++n) {  // silu(gate) * up in double
    for (int f = 0; f < F; ++f) {
      const double g = gu[n * 2 * F + f], u = gu[n * 2 * F + F + f];
      const double want = g / (1 + std::exp(-g)) * u;
      ASSERT_NEAR(out[n * F + f], want, 2e-6 * (1 + std::fabs(want))) << n << "," << f;
    }
  }
  std::vector<float> dgu(N * 2 * F, -9.f);
  SwigluBackward(pool_, dgu.data(), gu.data(), w.data(), N, F);
  ExpectSameForPoolSizes("swiglu", [&](WorkerPool& pool) {
    std::vector<float> o(N * F), d(N * 2 * F);
    SwigluForward(pool, o.data(), gu.data(), N, F);
    SwigluBackward(pool, d.data(), gu.data(), w.data(), N, F);
    o.insert(o.end(), d.begin(), d.end());
    return o;
  });
  CheckGrad("dgu", gu, dgu, loss, 130);
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

// Exact GELU against x Phi(x) in long double (erfc keeps the left tail's relative precision, as
// 1 + erf(x/sqrt 2) would not) on a dense grid over [-12, 12], a sparser one down to -14.5 where
// the results become subnormal (an ulp there is denorm_min), and special values: forward and
// backward within 4 ulp (measured: see gelu_erf.cc's header; its vector erf is not correctly
// rounded, the double erfc it replaced was within 0.5 ulp). Limits: gelu(x) = x and gelu' = 1 far
// right, -0 and 0 far left and at -inf, NaN in gives NaN out. The same bits for a pool of 1 or 3
// and wherever a value sits in a range (8-lane tails). Then finite differences.
TEST_F(FiniteDifference, GeluErf) {
  static constexpr float kMin = std::numeric_limits<float>::min(),
                         kDenorm = std::numeric_limits<float>::denorm_min(),
                         kBig = std::numeric_limits<float>::max();
  std::vector<float> x;
  for (int i = -120000; i <= 120000; ++i) x.push_back(i * 1e-4f);
  for (int i = 0; i <= 2500; ++i) x.push_back(-12.f - i * 1e-3f);
  for (float v :
       {0.f,    -0.f,    kDenorm,    -kDenorm,    kMin,         -kMin,       1e-40f, -1e-40f,
        1e-30f, -1e-30f, 0.7517915f, -0.7517915f, -0.75179154f, -0.7517916f, 13.f,   20.f,
        -20.f,  30.f,    -30.f,      1e30f,       -1e30f,       kBig,        -kBig}) {
    x.push_back(v);
  }
  const std::size_t n = x.size();
  std::vector<float> out(n), dx(n), ones(n, 1.f);
  GeluErfForward(pool_, out.data(), x.data(), n);
  GeluErfBackward(pool_, dx.data(), x.data(), ones.data(), n);
  auto ulp = [](float v) { return std::max(std::fabs(std::nextafter(v, INFINITY) - v), kDenorm); };
  double worst = 0, worst_d = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const long double xi = x[i], phi = 0.5L * std::erfc(-xi / std::sqrt(2.0L));
    const long double want = xi * phi;
    const long double dwant = phi + xi * std::exp(-0.5L * xi * xi) / std::sqrt(2.0L * M_PI);
    const double e = double(std::fabs(out[i] - want) / ulp(float(want)));
    const double ed = double(std::fabs(dx[i] - dwant) / ulp(float(dwant)));
    ASSERT_LE(e, 4.0) << "x " << x[i] << " gelu " << out[i] << " want " << double(want);
    ASSERT_LE(ed, 4.0) << "x " << x[i] << " gelu' " << dx[i] << " want " << double(dwant);
    if (std::fabs(x[i]) <= 12.f) {
      worst = std::max(worst, e);
      worst_d = std::max(worst_d, ed);
    }
  }
  RecordProperty("max_ulp_forward", std::to_string(worst));
  RecordProperty("max_ulp_backward", std::to_string(worst_d));
  std::printf("GeluErf: max ulp over [-12, 12]: forward %.3f backward %.3f\n", worst, worst_d);

  const float inf = INFINITY, nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> sx = {inf, -inf, nan, -nan, 1e30f, -1e30f, kBig, -kBig, -30.f};
  std::vector<float> so(sx.size()), sd(sx.size()), sones(sx.size(), 1.f);
  GeluErfForward(pool_, so.data(), sx.data(), sx.size());
  GeluErfBackward(pool_, sd.data(), sx.data(), sones.data(), sx.size());
  EXPECT_EQ(so[0], inf);
  EXPECT_EQ(sd[0], 1.f);
  for (std::size_t i : {1, 5, 7, 8}) {
    EXPECT_EQ(so[i], 0.f) << sx[i];
    EXPECT_EQ(sd[i], 0.f) << sx[i];
  }
  for (std::size_t i : {2, 3}) {
    EXPECT_TRUE(std::isnan(so[i]));
    EXPECT_TRUE(std::isnan(sd[i]));
  }
  for (std::size_t i : {4, 6}) {
    EXPECT_EQ(so[i], sx[i]);
    EXPECT_EQ(sd[i], 1.f);
  }

  // Bits independent of the pool and of the position: x[j..j+m) at offsets 0..8 of a buffer and in
  // ranges of every length 1..17, against the one-call values.
  auto same_bits = [](const float* a, const float* b, std::size_t m) {
    return std::memcmp(a, b, m * sizeof(float)) == 0;
  };
  ExpectSameForPoolSizes("gelu erf", [&](WorkerPool& pool) {
    std::vector<float> o(n), d(n);
    GeluErfForward(pool, o.data(), x.data(), n);
    GeluErfBackward(pool, d.data(), x.data(), ones.data(), n);
    EXPECT_TRUE(same_bits(o.data(), out.data(), n));
    EXPECT_TRUE(same_bits(d.data(), dx.data(), n));
    return std::vector<float>();
  });
  for (std::size_t off = 0; off <= 8; ++off) {
    for (std::size_t m = 1; m <= 17; ++m) {
      const std::size_t j = 3 * 8 * 1000 + 5;  // an arbitrary start
      std::vector<float> xs(off + m, 7.f), o(off + m), d(off + m);
      std::copy(x.begin() + j, x.begin() + j + m, xs.begin() + off);
      GeluErfForward(pool_, o.data() + off, xs.data() + off, m);
      GeluErfBackward(pool_, d.data() + off, xs.data() + off, ones.data(), m);
      ASSERT_TRUE(same_bits(o.data() + off, out.data() + j, m)) << off << " " << m;
      ASSERT_TRUE(same_bits(d.data() + off, dx.data() + j, m)) << off << " " << m;
    }
  }
  // in place over dout
  CheckActivation(
      pool_, rng_, "gelu erf", GeluErfForward,
      [&](float* d, const float* x, const float*) { GeluErfBackward(pool_, d, x, d, 37); });
}

TEST_F(FiniteDifference, Tanh) {
  const auto x = Random(37, rng_, 2.f);
  std::vector<float> out(37);
  TanhForward(pool_, out.data(), x.data(), 37);
  for (std::size_t i = 0; i < 37; ++i) ASSERT_NEAR(out[i], std::tanh(double(x[i])), 1e-7) << i;
  const float big = 40.f, one = 1.f;  // saturated: 1, gradient 0
  float y, dy;
  TanhForward(pool_, &y, &big, 1);
  TanhBackward(pool_, &dy, &y, &one, 1);
  EXPECT_EQ(y, 1.f);
  EXPECT_EQ(dy, 0.f);
  CheckActivation(pool_, rng_, "tanh", TanhForward, [&](float* d, const float*, const float* o) {
    TanhBackward(pool_, d, o, d, 37);
  });
}

// The QA span loss: per batch row a cross-entropy over positions for the start column and one for
// the end column of logits (B,T,2), against a double log-softmax; labels outside [0,T) (T is
// Hugging Face's clamped ignore_index; -1 and 1000 too) give loss 0 and zero gradient; the
// gradient by finite differences of sum(losses[b,0]) * dloss_start + sum(losses[b,1]) * dloss_end,
// written over the logits in place.
TEST_F(FiniteDifference, SpanCrossEntropy) {
  const int B = 5, T = 11;
  auto logits = Random(B * T * 2, rng_, 3.f);
  const std::vector<int> starts = {0, 10, T, 4, -1}, ends = {3, 10, 2, T, 1000};
  const float dstart = 0.37f, dend = -0.61f;
  std::vector<float> losses(B * 2), lse(B * 2);
  auto loss = [&] {
    SpanCrossEntropyForward(pool_, losses.data(), lse.data(), logits.data(), starts.data(),
                            ends.data(), B, T);
    double s = 0;
    for (int b = 0; b < B; ++b)
      s += losses[2 * b] * double(dstart) + losses[2 * b + 1] * double(dend);
    return s;
  };
  loss();
  for (int b = 0; b < B; ++b) {
    for (int k = 0; k < 2; ++k) {
      double m = -1e30, z = 0;
      for (int t = 0; t < T; ++t) m = std::max(m, double(logits[(b * T + t) * 2 + k]));
      for (int t = 0; t < T; ++t) z += std::exp(logits[(b * T + t) * 2 + k] - m);
      ASSERT_NEAR(lse[2 * b + k], m + std::log(z), 1e-5) << b << "," << k;
      const int label = (k == 0 ? starts : ends)[b];
      if (label < 0 || label >= T) {
        ASSERT_EQ(losses[2 * b + k], 0.f) << b << "," << k;
        continue;
      }
      ASSERT_NEAR(losses[2 * b + k], m + std::log(z) - logits[(b * T + label) * 2 + k], 1e-5);
    }
  }
  std::vector<float> d(logits);
  SpanCrossEntropyBackward(pool_, d.data(), d.data(), lse.data(), starts.data(), ends.data(),
                           dstart, dend, B, T);
  for (int t = 0; t < T; ++t) {  // ignored: row 2's start, row 3's end, row 4's start and end
    ASSERT_EQ(d[(2 * T + t) * 2 + 0], 0.f) << t;
    ASSERT_NE(d[(2 * T + t) * 2 + 1], 0.f) << t;
    ASSERT_EQ(d[(3 * T + t) * 2 + 1], 0.f) << t;
    ASSERT_EQ(d[(4 * T + t) * 2 + 0], 0.f) << t;
    ASSERT_EQ(d[(4 * T + t) * 2 + 1], 0.f) << t;
  }
  ExpectSameForPoolSizes("span cross-entropy", [&](WorkerPool& pool) {
    std::vector<float> l(B * 2), e(B * 2), g(logits.size());
    SpanCrossEntropyForward(pool, l.data(), e.data(), logits.data(), starts.data(), ends.data(), B,
                            T);
    SpanCrossEntropyBackward(pool, g.data(), logits.data(), e.data(), starts.data(), ends.data(),
                             dstart, dend, B, T);
    for (const auto* v : {&e, &g}) l.insert(l.end(), v->begin(), v->end());
    return l;
  });
  CheckGrad("dlogits", logits, d, loss, B * T * 2);
}

// Dropout's mask. Keep rate: over 10^6 indices the kept count is binomial(n, 1-p); 6 standard
// deviations (~2.7e-3 of n at p = 0.1: a 1e-9 chance of failing a fair coin) bound it.
// Independence: two seeds, or two offsets, agree on about p^2 + (1-p)^2 of the decisions (also 6
// sigma), and the 4 pairs (kept, kept), ... of neighbouring indices occur at their product
// frequencies.
TEST(Dropout, KeepRateAndIndependence) {
  const std::size_t n = 1000000;
  for (float p : {0.1f, 0.5f, 0.9f}) {
    SCOPED_TRACE("p " + std::to_string(p));
    std::size_t kept = 0, same_seed = 0, same_offset = 0, pairs[2][2] = {{0, 0}, {0, 0}};
    for (std::size_t i = 0; i < n; ++i) {
      const bool k = DropoutKeep(42, i, p);
      kept += k;
      same_seed += k == DropoutKeep(43, i, p);
      same_offset += k == DropoutKeep(42, i + n, p);
      ++pairs[k][DropoutKeep(42, i + 1, p)];
    }
    const double q = 1.0 - p, sd = std::sqrt(n * p * q);
    EXPECT_NEAR(double(kept), n * q, 6 * sd);
    const double agree = p * double(p) + q * q, sd_agree = std::sqrt(n * agree * (1 - agree));
    EXPECT_NEAR(double(same_seed), n * agree, 6 * sd_agree);
    EXPECT_NEAR(double(same_offset), n * agree, 6 * sd_agree);
    for (int a = 0; a < 2; ++a) {
      for (int b = 0; b < 2; ++b) {
        const double f = (a ? q : p) * (b ? q : p);
        EXPECT_NEAR(double(pairs[a][b]), n * f, 6 * std::sqrt(n * f * (1 - f))) << a << b;
      }
    }
  }
  for (std::size_t i = 0; i < 1000; ++i) {  // the ends: p = 0 keeps all, p = 1 none
    ASSERT_TRUE(DropoutKeep(7, i, 0.f));
    ASSERT_FALSE(DropoutKeep(7, i, 1.f));
  }
}

// The kernels: out = inp * keep / (1-p) with DropoutKeep's decisions; the same bits for pools of
// 1, 2 and 3 workers and for [0, n) computed as two calls with matching offsets; backward applies
// the forward's mask (a linear map: <drop(x), y> = <x, dropback(y)>), in place too; p = 0 copies.
TEST(Dropout, KernelsSplitInvariant) {
  const std::size_t n = 10007, half = 4000;
  const float p = 0.3f;
  const uint64_t seed = 0x1234, offset = 555;
  std::mt19937 rng(9);
  const auto x = Random(n, rng), y = Random(n, rng);
  std::vector<std::vector<float>> outs;
  for (int workers : {1, 2, 3}) {
    WorkerPool pool(std::vector<int>(workers, 0), nullptr, "drop");
    std::vector<float> out(n), split(n);
    DropoutForward(pool, out.data(), x.data(), n, p, seed, offset);
    DropoutForward(pool, split.data(), x.data(), half, p, seed, offset);
    DropoutForward(pool, split.data() + half, x.data() + half, n - half, p, seed, offset + half);
    EXPECT_EQ(split, out) << workers;
    outs.push_back(out);
  }
  EXPECT_EQ(outs[0], outs[1]);
  EXPECT_EQ(outs[0], outs[2]);
  const std::vector<float>& out = outs[0];
  for (std::size_t i = 0; i < n; ++i) {
    const float want = DropoutKeep(seed, offset + i, p) ? x[i] * (1.f / (1.f - p)) : 0.f;
    ASSERT_EQ(out[i], want) << i;
  }
  WorkerPool pool(std::vector<int>(2, 0), nullptr, "drop");
  std::vector<float> back(y);
  DropoutBackward(pool, back.data(), back.data(), n, p, seed, offset);  // in place
  double lhs = 0, rhs = 0;
  for (std::size_t i = 0; i < n; ++i) {
    lhs += double(out[i]) * y[i];
    rhs += double(x[i]) * back[i];
    ASSERT_EQ(back[i] == 0.f, out[i] == 0.f) << i;
  }
  EXPECT_NEAR(lhs, rhs, 1e-9 * n);
  std::vector<float> copy(n, -1.f), inplace(x);
  DropoutForward(pool, copy.data(), x.data(), n, 0.f, seed, offset);
  DropoutForward(pool, inplace.data(), inplace.data(), n, 0.f, seed, offset);
  EXPECT_EQ(copy, x);
  EXPECT_EQ(inplace, x);
}

}  // namespace
}  // namespace cputrain::kernels
