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
#include <functional>
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

// Causal attention in double, from the definition: qkv (B,T,(NH+2*NKV)*hs), query head h attends
// with key/value head h / (NH/NKV) (transformers' repeat_kv). out (B,T,NH*hs), att (B,NH,T,T).
struct ReferenceAttention {
  std::vector<double> out, att;
  ReferenceAttention(const std::vector<float>& qkv, int B, int T, int NH, int NKV, int hs)
      : out(std::size_t(B) * T * NH * hs, 0.0), att(std::size_t(B) * NH * T * T, 0.0) {
    const int R = (NH + 2 * NKV) * hs, C = NH * hs;
    for (int b = 0; b < B; ++b) {
      for (int h = 0; h < NH; ++h) {
        const int g = h / (NH / NKV);
        auto at = [&](int t, int off) { return double(qkv[(std::size_t(b) * T + t) * R + off]); };
        for (int t = 0; t < T; ++t) {
          double* p = &att[((std::size_t(b) * NH + h) * T + t) * T];
          double mx = -1e300, sum = 0;
          for (int j = 0; j <= t; ++j) {
            for (int d = 0; d < hs; ++d) p[j] += at(t, h * hs + d) * at(j, (NH + g) * hs + d);
            p[j] /= std::sqrt(double(hs));
            mx = std::max(mx, p[j]);
          }
          for (int j = 0; j <= t; ++j) sum += (p[j] = std::exp(p[j] - mx));
          for (int j = 0; j <= t; ++j) {
            p[j] /= sum;
            for (int d = 0; d < hs; ++d)
              out[(std::size_t(b) * T + t) * C + h * hs + d] +=
                  p[j] * at(j, (NH + NKV + g) * hs + d);
          }
        }
      }
    }
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

// Decoding one position against a KV cache is the forward's row for that position: the cache
// here is the keys and values inside qkv itself (row stride ld = (NH+2*NKV)*hs), the query row t's.
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
  for (const RopeScaling& s : {RopeScaling{}, llama3}) {
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

}  // namespace
}  // namespace cputrain::kernels
