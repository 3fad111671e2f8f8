// LoRA's forward and backward (model/lora.h, kernels LoraForward / LoraBackward, the passes'
// lora argument), proved against what they must equal:
//  - the kernels: finite differences in fp32 and a double-precision reference of every gradient,
//    with and without dropout, adding into dinp and (with accumulate) into dA, dB;
//  - the frozen base: the kernels' null gradients skip those products, and change nothing else;
//  - the passes, for a tiny GPT-2, Llama (GQA, SwiGLU, untied head, all seven projections), BERT
//    and DistilBERT (span head, qa_outputs saved): the loss equals the merged model's (LoraMerge),
//    each adapter's gradient is the chain rule of the merged model's weight gradient (dB = scale
//    dW_rows A^T, dA = scale B^T dW_rows), the saved modules' gradients are the merged model's,
//    on_ready reports the trainable layout's ReadyPoints, pool sizes agree, reruns are
//    bit-identical, bf16 stays near fp32, accumulate adds; with the adapters' dropout on, the
//    gradient matches finite differences of the dropped loss and any split of the batch into
//    placements drops the same elements.
// Measured errors are printed ("[measured] ...") so that the tolerances can be judged.
#include "model/lora.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "family_shapes.h"
#include "kernels/bf16.h"
#include "kernels/kernels.h"
#include "model/params.h"
#include "model/transformer.h"
#include "runtime/worker_pool.h"

namespace cputrain {
namespace {

std::vector<float> Random(std::size_t n, std::mt19937& rng, float scale = 1.f) {
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// ||got - want|| / ||want||, norm-wise over n elements.
double RelErr(const float* got, const double* want, std::size_t n) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < n; ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}
double RelErr(const float* got, const float* want, std::size_t n) {
  std::vector<double> w(want, want + n);
  return RelErr(got, w.data(), n);
}

WorkerPool MakePool(int workers, const char* name) {
  return WorkerPool(std::vector<int>(workers, 0), nullptr, name);
}

// ---------------------------------------------------------------- kernels

// One site: x (N,IC), A (r,IC), B (rows,r); out (N,ldo) receives columns [col0, col0 + rows),
// dout (N,ldd) holds them at [dcol0, dcol0 + rows). N, rows and IC are cut unevenly by the
// 16-aligned slices of a 2-worker pool; rows < 16 leaves worker 1 no rows of dB.
struct Site {
  static constexpr std::size_t N = 21;
  static constexpr int IC = 18, r = 3, rows = 7, ldo = 12, col0 = 3, ldd = 9, dcol0 = 1;
  static constexpr float scale = 1.5f;
  std::vector<float> x, A, B, out0, w;  // w: the loss's weights on out's site columns
  kernels::LoraDropout drop;

  Site(float p, std::mt19937& rng)
      : x(Random(N * IC, rng)),
        A(Random(r * IC, rng, 0.5f)),
        B(Random(rows * r, rng, 0.5f)),
        out0(Random(N * ldo, rng)),
        w(Random(N * rows, rng)) {
    drop.p = p;
    drop.seed = 99;
    drop.offset = 1000;  // as a placement's row0 * T * IC
  }
  // L = sum of w * out[:, col0 : col0 + rows] after the forward (double).
  double Loss(WorkerPool& pool, std::vector<float>* h_out = nullptr) const {
    std::vector<float> out(out0), h(N * r), xd(N * IC);
    kernels::LoraForward(pool, out.data() + col0, h.data(), xd.data(), x.data(), A.data(), B.data(),
                         N, IC, r, rows, ldo, scale, drop);
    double s = 0;
    for (std::size_t n = 0; n < N; ++n)
      for (int j = 0; j < rows; ++j)
        s += static_cast<double>(out[n * ldo + col0 + j]) * w[n * rows + j];
    if (h_out) *h_out = h;
    return s;
  }
  // dout with the loss's weights in its site columns, the rest garbage that must not be read.
  std::vector<float> Dout() const {
    std::vector<float> d(N * ldd, 1e6f);
    for (std::size_t n = 0; n < N; ++n)
      for (int j = 0; j < rows; ++j) d[n * ldd + dcol0 + j] = w[n * rows + j];
    return d;
  }
  // The double-precision reference: out's site columns, dA, dB and dx.
  struct Ref {
    std::vector<double> out, dA, dB, dx;
  };
  Ref Reference() const {
    const kernels::DropoutMask mask(drop.seed, drop.p);
    std::vector<double> xd(N * IC), h(N * r, 0.0), dh(N * r, 0.0);
    for (std::size_t i = 0; i < N * IC; ++i)
      xd[i] = drop.p > 0 ? (mask.Keep(drop.offset + i) ? double{x[i]} * mask.scale : 0.0) : x[i];
    Ref ref{std::vector<double>(N * rows), std::vector<double>(r * IC, 0.0),
            std::vector<double>(rows * r, 0.0), std::vector<double>(N * IC, 0.0)};
    for (std::size_t n = 0; n < N; ++n)
      for (int k = 0; k < r; ++k)
        for (int c = 0; c < IC; ++c) h[n * r + k] += xd[n * IC + c] * A[k * IC + c];
    for (std::size_t n = 0; n < N; ++n) {
      for (int j = 0; j < rows; ++j) {
        double y = 0;
        for (int k = 0; k < r; ++k) y += h[n * r + k] * B[j * r + k];
        ref.out[n * rows + j] = out0[n * ldo + col0 + j] + scale * y;
        for (int k = 0; k < r; ++k) {
          ref.dB[j * r + k] += scale * w[n * rows + j] * h[n * r + k];
          dh[n * r + k] += scale * w[n * rows + j] * B[j * r + k];
        }
      }
    }
    for (std::size_t n = 0; n < N; ++n)
      for (int k = 0; k < r; ++k)
        for (int c = 0; c < IC; ++c) {
          ref.dA[k * IC + c] += dh[n * r + k] * xd[n * IC + c];
          const double g = dh[n * r + k] * A[k * IC + c];
          const std::size_t i = n * IC + c;
          ref.dx[i] += drop.p > 0 ? (mask.Keep(drop.offset + i) ? g * mask.scale : 0.0) : g;
        }
    return ref;
  }
};

struct KernelGrads {
  std::vector<float> dinp, dA, dB;
};
KernelGrads Backward(WorkerPool& pool, const Site& s, const KernelGrads& start, bool accumulate) {
  std::vector<float> out(s.out0), h(Site::N * Site::r), xd(Site::N * Site::IC),
      dh(Site::N * Site::r);
  kernels::LoraForward(pool, out.data() + Site::col0, h.data(), xd.data(), s.x.data(), s.A.data(),
                       s.B.data(), Site::N, Site::IC, Site::r, Site::rows, Site::ldo, Site::scale,
                       s.drop);
  std::fill(xd.begin(), xd.end(), -7.f);  // backward recomputes it
  const std::vector<float> dout = s.Dout();
  KernelGrads g = start;
  kernels::LoraBackward(pool, g.dinp.data(), g.dA.data(), g.dB.data(), dh.data(), xd.data(),
                        dout.data() + Site::dcol0, s.x.data(), h.data(), s.A.data(), s.B.data(),
                        Site::N, Site::IC, Site::r, Site::rows, Site::ldd, Site::scale, s.drop,
                        accumulate);
  return g;
}

class LoraKernel : public ::testing::TestWithParam<float> {
 protected:
  void SetUp() override { kernels::InitBlas(); }
};

// Forward against the double reference; columns outside the site untouched. Backward against the
// reference (dinp and, with accumulate, dA and dB added to random starting values) and against
// central differences of the fp32 loss (kernels_fd_test.cc's tolerance: h = 1e-2, 1e-2 relative +
// 2e-3).
TEST_P(LoraKernel, MatchesTheReferenceAndFiniteDifferences) {
  std::mt19937 rng(5);
  Site s(GetParam(), rng);
  WorkerPool pool = MakePool(2, "lora");
  const Site::Ref ref = s.Reference();
  {
    std::vector<float> out(s.out0), h(Site::N * Site::r), xd(Site::N * Site::IC);
    kernels::LoraForward(pool, out.data() + Site::col0, h.data(), xd.data(), s.x.data(), s.A.data(),
                         s.B.data(), Site::N, Site::IC, Site::r, Site::rows, Site::ldo, Site::scale,
                         s.drop);
    std::vector<float> site(Site::N * Site::rows);
    for (std::size_t n = 0; n < Site::N; ++n) {
      for (int c = 0; c < Site::ldo; ++c) {
        const bool in_site = c >= Site::col0 && c < Site::col0 + Site::rows;
        if (in_site) {
          site[n * Site::rows + c - Site::col0] = out[n * Site::ldo + c];
        } else {
          EXPECT_EQ(out[n * Site::ldo + c], s.out0[n * Site::ldo + c]) << n << "," << c;
        }
      }
    }
    const double e = RelErr(site.data(), ref.out.data(), site.size());
    std::printf("[measured] LoRA kernel p=%g forward rel err %.3g\n", GetParam(), e);
    EXPECT_LT(e, 1e-6);
  }
  KernelGrads start{Random(Site::N * Site::IC, rng), Random(Site::r * Site::IC, rng),
                    Random(Site::rows * Site::r, rng)};
  for (bool accumulate : {false, true}) {
    const KernelGrads g = Backward(pool, s, start, accumulate);
    auto plus = [&](const std::vector<double>& d, const std::vector<float>& s0, bool add) {
      std::vector<double> v(d);
      for (std::size_t i = 0; i < v.size(); ++i) v[i] += add ? s0[i] : 0.0;
      return v;
    };
    const double e_dx = RelErr(g.dinp.data(), plus(ref.dx, start.dinp, true).data(), ref.dx.size());
    const double e_dA =
        RelErr(g.dA.data(), plus(ref.dA, start.dA, accumulate).data(), ref.dA.size());
    const double e_dB =
        RelErr(g.dB.data(), plus(ref.dB, start.dB, accumulate).data(), ref.dB.size());
    std::printf("[measured] LoRA kernel p=%g accumulate=%d rel err dinp %.3g dA %.3g dB %.3g\n",
                GetParam(), accumulate, e_dx, e_dA, e_dB);
    EXPECT_LT(e_dx, 1e-6);
    EXPECT_LT(e_dA, 1e-6);
    EXPECT_LT(e_dB, 1e-6);
  }
  // Finite differences of the fp32 loss against the fp32 gradients (written, dinp from zero).
  const KernelGrads g =
      Backward(pool, s,
               {std::vector<float>(Site::N * Site::IC, 0.f), std::vector<float>(Site::r * Site::IC),
                std::vector<float>(Site::rows * Site::r)},
               false);
  auto check = [&](const char* what, std::vector<float>& v, const std::vector<float>& ana) {
    constexpr float kH = 1e-2f;
    std::mt19937 pick(7);
    for (int k = 0; k < 30; ++k) {
      const std::size_t i = pick() % v.size();
      const float saved = v[i];
      v[i] = saved + kH;
      const double up = s.Loss(pool);
      v[i] = saved - kH;
      const double down = s.Loss(pool);
      v[i] = saved;
      const double num = (up - down) / (2.0 * kH);
      EXPECT_NEAR(num, ana[i], 1e-2 * std::fabs(ana[i]) + 2e-3) << what << "[" << i << "]";
    }
  };
  check("x", s.x, g.dinp);
  check("A", s.A, g.dA);
  check("B", s.B, g.dB);
}

// Dropout p > 0 drops about p of the input (the mask of DropoutKeep over the global index).
TEST_P(LoraKernel, DropsTheInputAsTheMaskSays) {
  if (GetParam() == 0.f) GTEST_SKIP() << "no dropout";
  std::mt19937 rng(6);
  Site s(GetParam(), rng);
  WorkerPool pool = MakePool(2, "lora");
  std::vector<float> out(s.out0), h(Site::N * Site::r), xd(Site::N * Site::IC);
  kernels::LoraForward(pool, out.data() + Site::col0, h.data(), xd.data(), s.x.data(), s.A.data(),
                       s.B.data(), Site::N, Site::IC, Site::r, Site::rows, Site::ldo, Site::scale,
                       s.drop);
  std::size_t zeros = 0;
  for (std::size_t i = 0; i < xd.size(); ++i) {
    const bool keep = kernels::DropoutKeep(s.drop.seed, s.drop.offset + i, s.drop.p);
    EXPECT_EQ(xd[i], keep ? s.x[i] * (1.f / (1.f - s.drop.p)) : 0.f) << i;
    zeros += !keep;
  }
  EXPECT_NEAR(static_cast<double>(zeros) / xd.size(), s.drop.p, 0.1);
}

// The same pool size gives the same bits run to run; pools of 1 and 3 workers agree within 1e-6.
TEST_P(LoraKernel, PoolSizes) {
  std::mt19937 rng(8);
  const Site s(GetParam(), rng);
  const KernelGrads zero{std::vector<float>(Site::N * Site::IC, 0.f),
                         std::vector<float>(Site::r * Site::IC),
                         std::vector<float>(Site::rows * Site::r)};
  WorkerPool one = MakePool(1, "p1"), three = MakePool(3, "p3");
  const KernelGrads a = Backward(three, s, zero, false), b = Backward(three, s, zero, false),
                    c = Backward(one, s, zero, false);
  EXPECT_EQ(a.dinp, b.dinp);
  EXPECT_EQ(a.dA, b.dA);
  EXPECT_EQ(a.dB, b.dB);
  EXPECT_LT(RelErr(c.dinp.data(), a.dinp.data(), a.dinp.size()), 1e-6);
  EXPECT_LT(RelErr(c.dA.data(), a.dA.data(), a.dA.size()), 1e-6);
  EXPECT_LT(RelErr(c.dB.data(), a.dB.data(), a.dB.size()), 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Dropout, LoraKernel, ::testing::Values(0.f, 0.3f),
                         [](const ::testing::TestParamInfo<float>& i) {
                           return i.param > 0 ? std::string("p03") : std::string("p0");
                         });

// A frozen base: null parameter gradients skip those products and leave dinp's bits as they were.
TEST(FrozenKernels, NullGradientsSkipOnlyThemselves) {
  kernels::InitBlas();
  std::mt19937 rng(9);
  WorkerPool pool = MakePool(2, "frozen");
  const std::size_t N = 21;
  const int C = 18, OC = 35;
  const auto inp = Random(N * C, rng), w = Random(OC * C, rng), dout = Random(N * OC, rng);
  std::vector<float> dinp_full(N * C), dinp_frozen(N * C), dw(OC * C), db(OC);
  kernels::MatmulBackward(pool, dinp_full.data(), dw.data(), db.data(), dout.data(), inp.data(),
                          w.data(), N, C, OC, OC);
  kernels::MatmulBackward(pool, dinp_frozen.data(), nullptr, nullptr, dout.data(), inp.data(),
                          w.data(), N, C, OC, OC);
  EXPECT_EQ(dinp_full, dinp_frozen);
  if (kernels::DetectBf16().trains()) {
    std::vector<uint16_t> wb(w.size()), inb(N * C), doutb(N * OC);
    kernels::ConvertRowToBf16(wb.data(), w.data(), w.size());
    kernels::MatmulBackwardBf16(pool, dinp_full.data(), dw.data(), db.data(), dout.data(),
                                doutb.data(), inp.data(), inb.data(), wb.data(), N, C, OC, OC);
    kernels::MatmulBackwardBf16(pool, dinp_frozen.data(), nullptr, nullptr, dout.data(),
                                doutb.data(), inp.data(), inb.data(), wb.data(), N, C, OC, OC);
    EXPECT_EQ(dinp_full, dinp_frozen);
  }
  // Norms: dinp added to the same starting values, with and without the parameter gradients.
  const auto x = Random(N * C, rng), d = Random(N * C, rng), g = Random(C, rng),
             start = Random(N * C, rng);
  std::vector<float> out(N * C), mean(N), rstd(N), gw(C), gb(C);
  kernels::LayerNormForward(pool, out.data(), mean.data(), rstd.data(), x.data(), g.data(),
                            g.data(), N, C);
  std::vector<float> full(start), frozen(start), half(start), gw2(C);
  kernels::LayerNormBackward(pool, full.data(), gw.data(), gb.data(), d.data(), x.data(), g.data(),
                             mean.data(), rstd.data(), N, C);
  kernels::LayerNormBackward(pool, frozen.data(), nullptr, nullptr, d.data(), x.data(), g.data(),
                             mean.data(), rstd.data(), N, C);
  kernels::LayerNormBackward(pool, half.data(), gw2.data(), nullptr, d.data(), x.data(), g.data(),
                             mean.data(), rstd.data(), N, C);
  EXPECT_EQ(full, frozen);
  EXPECT_EQ(full, half);
  EXPECT_EQ(gw, gw2);
  kernels::RmsNormForward(pool, out.data(), rstd.data(), x.data(), g.data(), N, C, 1e-6f);
  full = frozen = start;
  kernels::RmsNormBackward(pool, full.data(), gw.data(), d.data(), x.data(), g.data(), rstd.data(),
                           N, C);
  kernels::RmsNormBackward(pool, frozen.data(), nullptr, d.data(), x.data(), g.data(), rstd.data(),
                           N, C);
  EXPECT_EQ(full, frozen);
  // Embeddings: a frozen token table, positions and types still summed.
  const int B = 3, T = 7, V = 11;
  std::vector<int> tokens(B * T), types(B * T);
  for (int i = 0; i < B * T; ++i) tokens[i] = (i * 5) % V, types[i] = i % 2;
  const auto de = Random(static_cast<std::size_t>(B) * T * C, rng);
  std::vector<float> dwte(V * C, 0.f), dwpe(T * C), dwtt(2 * C), dwpe2(T * C), dwtt2(2 * C);
  kernels::EncoderBackward(pool, dwte.data(), dwpe.data(), de.data(), tokens.data(), B, T, C, false,
                           types.data(), dwtt.data());
  kernels::EncoderBackward(pool, nullptr, dwpe2.data(), de.data(), tokens.data(), B, T, C, false,
                           types.data(), dwtt2.data());
  EXPECT_EQ(dwpe, dwpe2);
  EXPECT_EQ(dwtt, dwtt2);
}

// ---------------------------------------------------------------- passes

namespace m = model;
constexpr int kB = 2, kT = 8;

struct Case {
  std::string name;
  m::Shape shape;
  std::vector<std::string> targets, save;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

m::Shape Gpt2() { return m::Shape{16, 50, m::Shape::PadVocab(50), 2, 2, 16}; }

m::Shape Llama() {
  m::Shape s(16, 60, m::Shape::PadVocab(60), 2, 4, 16);
  s.arch = m::Arch::kLlama;
  s.NKV = 2;
  s.F = 24;
  s.norm_eps = 1e-6f;
  s.tied = false;
  s.attn_bias = s.mlp_bias = false;
  return s;
}

m::Shape Encoder(m::Arch arch) {
  m::Shape s = test::SmallEncoder(arch);
  s.head_dropout = arch == m::Arch::kDistilBert ? 0.1f : 0.f;
  return s;
}

std::vector<Case> Cases() {
  return {
      {"Gpt2", Gpt2(), {"c_attn", "c_proj", "c_fc"}, {"ln_f"}},
      // The tied head read from the trainable buffer: wte saved (with wpe).
      {"Gpt2SavedEmbeddings", Gpt2(), {"c_attn"}, {"wte", "wpe"}},
      {"Llama",
       Llama(),
       {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"},
       {"lm_head"}},
      // qa_outputs saved as PEFT's QUESTION_ANS task makes it, plus one table of the embeddings.
      {"Bert",
       Encoder(m::Arch::kBert),
       {"query", "key", "value", "dense"},
       {"position_embeddings"}},
      {"DistilBert",
       Encoder(m::Arch::kDistilBert),
       {"q_lin", "k_lin", "v_lin", "out_lin", "lin1", "lin2"},
       {"sa_layer_norm"}},
      // The decoder families with their quirks (tests/family_shapes.h: windows shorter than T,
      // a head size apart from C/NH, q/k norms, biases, Gemma's post-norms).
      {"Qwen2", test::SmallQwen2(), {"q_proj", "k_proj", "v_proj", "o_proj", "down_proj"}, {}},
      {"Qwen3",
       test::SmallQwen3(),
       {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"},
       {"q_norm"}},
      {"Mistral", test::SmallMistral(), {"q_proj", "v_proj"}, {"lm_head"}},
      {"Gemma3",
       test::SmallGemma3(),
       {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"},
       {"post_feedforward_layernorm"}},
      {"Phi3", test::SmallPhi3(), {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"}, {"norm"}},
  };
}

// The tokens of rows [row0, row0 + B) of one global batch (each a pure function of its row and
// position): Activations::TokenInts's layout.
std::vector<int> Tokens(const m::Shape& s, int row0, int B, int T) {
  const std::size_t N = static_cast<std::size_t>(B) * T;
  std::vector<int> tok(m::Activations::TokenInts(s, B, T));
  for (int b = 0; b < B; ++b) {
    const int row = row0 + b;
    for (int t = 0; t < T; ++t) {
      const std::size_t i = static_cast<std::size_t>(b) * T + t;
      tok[i] = (row * 37 + t * 11 + 3) % s.V;
      tok[N + i] = s.encoder() ? (s.types > 0 && t >= T / 2 ? 1 : 0) : (row * 13 + t * 7 + 5) % s.V;
    }
    if (!s.encoder()) continue;
    tok[2 * N + b] = T - 2 * row;          // lengths: the second row padded
    tok[2 * N + B + b] = 1 + row;          // starts
    tok[2 * N + 2 * B + b] = row ? T : 4;  // ends: the second row's ignored
  }
  return tok;
}

// Random base weights, with the norms moved off 1 and the biases off 0 so that a tensor read from
// the wrong buffer shows.
std::vector<float> BaseWeights(WorkerPool& pool, const m::ParamLayout& layout) {
  std::vector<float> p(layout.total());
  m::RandomInit(pool, layout, 3, p.data());
  for (const m::TensorInfo& info : layout.tensors()) {
    if (info.init != m::Init::kOnes && info.init != m::Init::kZeros) continue;
    for (int l = 0; l < (info.per_layer ? layout.shape().L : 1); ++l) {
      float* w = p.data() + layout.offset(info.t, l);
      for (std::size_t i = 0; i < info.numel; ++i) w[i] += 0.1f * std::sin(1.0f + i + 7.0f * l);
    }
  }
  return p;
}

struct PassOptions {
  int B = kB, row0 = 0;
  bool dropout = false;
  bool bf16 = false;
  bool accumulate = false;
  float dloss = 1.f / (kB * kT);
};

PassOptions WithDropout() {
  PassOptions o;
  o.dropout = true;
  return o;
}

struct Result {
  double loss = 0;
  std::vector<std::size_t> ready;
};

// Forward and Backward over rows [row0, row0 + B) of the test batch: without lora, the whole
// model's gradients into grads; with it, the trainable buffer's.
Result RunPass(WorkerPool& pool, const m::ParamLayout& layout, const std::vector<float>& params,
               const m::Lora* lora, const std::vector<float>* lora_params,
               std::vector<float>& grads, const PassOptions& o) {
  const m::Shape& s = layout.shape();
  m::Activations acts(s, o.B, kT, pool.size());
  std::vector<float> mem(acts.floats(), 0.f);
  std::vector<int> tokens = Tokens(s, o.row0, o.B, kT);
  acts.Bind(mem.data(), tokens.data());
  acts.dropout.on = o.dropout;
  acts.dropout.seed = 1234;
  acts.dropout.row0 = o.row0;
  std::vector<float> lora_acts(lora ? lora->ActFloats(o.B, kT) : 0);
  m::LoraPass pass{lora, lora_params ? lora_params->data() : nullptr, lora_acts.data()};
  std::vector<uint16_t> wb, in, dout, attn;
  m::Bf16Operands ops;
  if (o.bf16) {
    wb.resize(layout.total());
    kernels::ConvertToBf16(pool, wb.data(), params.data(), params.size());
    in.resize(m::Bf16Operands::InElems(s, o.B, kT));
    dout.resize(m::Bf16Operands::DoutElems(s, o.B, kT));
    attn.resize(m::Bf16Operands::AttnElems(pool.size(), kT));
    ops = {wb.data(), in.data(), dout.data(), attn.data()};
  }
  const m::Bf16Operands* bf16 = o.bf16 ? &ops : nullptr;
  const m::LoraPass* lp = lora ? &pass : nullptr;
  Result r;
  r.loss = m::Forward(pool, layout, params.data(), acts, o.B, kT, true, bf16, nullptr, lp);
  m::Backward(
      pool, layout, params.data(), grads.data(), acts, o.B, kT, o.dloss,
      [&](std::size_t from) { r.ready.push_back(from); }, o.accumulate, bf16, lp);
  return r;
}

// A case's base, adapters (init false: B random, so every term counts) and merged model.
class LoraPassTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    kernels::InitBlas();
    const Case& c = GetParam();
    ASSERT_EQ(c.shape.Problem(), "");
    base_layout_ = std::make_unique<m::ParamLayout>(c.shape);
    base_ = BaseWeights(pool_, *base_layout_);
    lora_ = MakeLora(0.f);
    lora_params_.resize(lora_->layout().total());
    m::LoraInit(pool_, *lora_, 17, base_.data(), lora_params_.data());
    // The saved modules move away from the base's copy: reading the base instead shows.
    for (const m::LoraSaved& x : lora_->saved()) {
      const m::TensorInfo& info = lora_->layout().info(x.t);
      for (int l = 0; l < (info.per_layer ? c.shape.L : 1); ++l) {
        float* p = lora_params_.data() + lora_->layout().offset(x.t, l);
        const std::size_t real = info.real_rows ? info.real_rows * info.shape[1] : info.numel;
        for (std::size_t i = 0; i < real; ++i) p[i] += 0.05f * std::cos(0.3f * i + l);
      }
    }
    merged_ = base_;
    m::LoraMerge(pool_, *lora_, lora_params_.data(), merged_.data());
  }
  std::unique_ptr<m::Lora> MakeLora(float dropout) const {
    m::LoraConfig cfg;
    cfg.r = 4;
    cfg.alpha = 2.f;  // scale 0.5
    cfg.dropout = dropout;
    cfg.init = m::LoraConfig::Init::kRandom;
    cfg.target_modules = GetParam().targets;
    cfg.modules_to_save = GetParam().save;
    return std::make_unique<m::Lora>(*base_layout_, cfg);
  }
  Result Lora(WorkerPool& pool, std::vector<float>& grads, const PassOptions& o = {},
              const m::Lora* lora = nullptr) {
    grads.resize(lora_->layout().total());
    return RunPass(pool, *base_layout_, base_, lora ? lora : lora_.get(), &lora_params_, grads, o);
  }

  WorkerPool pool_ = MakePool(2, "lora");
  std::unique_ptr<m::ParamLayout> base_layout_;
  std::vector<float> base_, merged_, lora_params_;
  std::unique_ptr<m::Lora> lora_;
};

// (a) the loss of the merged model; (b) the chain rule of its weight gradients; the saved
// modules' gradients are its; (c) on_ready at the trainable layout's ReadyPoints.
TEST_P(LoraPassTest, EqualsTheMergedModel) {
  const m::ParamLayout& LL = lora_->layout();
  const m::ParamLayout& BL = *base_layout_;
  std::vector<float> full(BL.total(), 0.f), grads;
  const Result want = RunPass(pool_, BL, merged_, nullptr, nullptr, full, {});
  const Result got = Lora(pool_, grads);
  const double loss_err = std::fabs(got.loss - want.loss) / std::fabs(want.loss);
  EXPECT_LT(loss_err, 1e-5) << got.loss << " vs " << want.loss;
  EXPECT_EQ(got.ready, LL.ReadyPoints());
  ASSERT_FALSE(lora_->sites().empty());
  const int r = lora_->config().r, L = BL.shape().L;
  const double scale = lora_->scale();
  double worst_site = 0, worst_saved = 0;
  for (const m::LoraSite& site : lora_->sites()) {
    for (int l = 0; l < L; ++l) {
      const float* dW = full.data() + BL.offset(site.base, l) +
                        static_cast<std::size_t>(site.row0) * site.in;  // (rows, in)
      const float* A = lora_params_.data() + LL.offset(site.a, l);      // (r, in)
      const float* B = lora_params_.data() + LL.offset(site.b, l);      // (rows, r)
      std::vector<double> dA(static_cast<std::size_t>(r) * site.in, 0.0),
          dB(static_cast<std::size_t>(site.rows) * r, 0.0);
      for (int i = 0; i < site.rows; ++i)
        for (int k = 0; k < r; ++k)
          for (int j = 0; j < site.in; ++j) {
            const double g = dW[static_cast<std::size_t>(i) * site.in + j];
            dB[i * r + k] += scale * g * A[static_cast<std::size_t>(k) * site.in + j];
            dA[static_cast<std::size_t>(k) * site.in + j] += scale * B[i * r + k] * g;
          }
      const double ea = RelErr(grads.data() + LL.offset(site.a, l), dA.data(), dA.size());
      const double eb = RelErr(grads.data() + LL.offset(site.b, l), dB.data(), dB.size());
      EXPECT_LT(ea, 1e-5) << site.module << " layer " << l << " dA";
      EXPECT_LT(eb, 1e-5) << site.module << " layer " << l << " dB";
      worst_site = std::max({worst_site, ea, eb});
    }
  }
  // A span head's bias gradient is 0 up to rounding (each row's softmax gradient sums to 0 over
  // positions): relative to it, 1e-7 absolute.
  for (const m::LoraSaved& x : lora_->saved()) {
    const m::TensorInfo& info = LL.info(x.t);
    for (int l = 0; l < (info.per_layer ? L : 1); ++l) {
      const float* g = grads.data() + LL.offset(x.t, l);
      const float* want = full.data() + BL.offset(x.t, l);
      double diff = 0, norm = 0;
      for (std::size_t i = 0; i < info.numel; ++i) {
        diff += (g[i] - want[i]) * (g[i] - want[i]);
        norm += static_cast<double>(want[i]) * want[i];
      }
      diff = std::sqrt(diff);
      norm = std::sqrt(norm);
      EXPECT_LE(diff, 1e-5 * norm + 1e-7) << x.hf_name << " layer " << l << ": norm " << norm;
      if (norm > 1e-5) worst_saved = std::max(worst_saved, diff / norm);
    }
  }
  std::printf("[measured] %s: loss rel err %.3g, adapters' grads %.3g, saved modules' %.3g\n",
              GetParam().name.c_str(), loss_err, worst_site, worst_saved);
}

// (d) pools of 1 and 2 workers agree within 1e-6; the same pool size gives the same bits.
TEST_P(LoraPassTest, PoolSizes) {
  WorkerPool one = MakePool(1, "p1");
  std::vector<float> g1, g2, g2b;
  const Result r1 = Lora(one, g1), r2 = Lora(pool_, g2), r2b = Lora(pool_, g2b);
  EXPECT_EQ(r2.loss, r2b.loss);
  EXPECT_EQ(g2, g2b);
  const double e = RelErr(g1.data(), g2.data(), g2.size());
  std::printf("[measured] %s: pools 1 vs 2 loss rel %.3g, grads rel %.3g\n",
              GetParam().name.c_str(), std::fabs(r1.loss - r2.loss) / std::fabs(r2.loss), e);
  EXPECT_NEAR(r1.loss, r2.loss, 1e-6 * std::fabs(r2.loss));
  EXPECT_LT(e, 1e-6);
}

// (e) bf16 base products (the LoRA terms and saved modules in fp32) within bf16's tolerance.
TEST_P(LoraPassTest, Bf16NearFp32) {
  if (!kernels::DetectBf16().trains()) GTEST_SKIP() << "this CPU has no AVX512_BF16";
  std::vector<float> g32, g16;
  const Result r32 = Lora(pool_, g32);
  PassOptions o;
  o.bf16 = true;
  const Result r16 = Lora(pool_, g16, o);
  const double el = std::fabs(r16.loss - r32.loss) / std::fabs(r32.loss);
  const double eg = RelErr(g16.data(), g32.data(), g32.size());
  std::printf("[measured] %s: bf16 vs fp32 loss rel %.3g, grads rel %.3g\n",
              GetParam().name.c_str(), el, eg);
  EXPECT_LT(el, 1e-3);  // measured up to 9e-6
  EXPECT_LT(eg, 2e-2);  // measured up to 3e-3
  EXPECT_EQ(r16.ready, lora_->layout().ReadyPoints());
}

// (f) accumulate adds: a second micro-batch of the same rows doubles every gradient.
TEST_P(LoraPassTest, AccumulateAdds) {
  std::vector<float> once, twice;
  Lora(pool_, once);
  Lora(pool_, twice);
  PassOptions o;
  o.accumulate = true;
  Lora(pool_, twice, o);
  std::vector<float> doubled(once);
  for (float& v : doubled) v *= 2;
  const double e = RelErr(twice.data(), doubled.data(), doubled.size());
  EXPECT_LT(e, 1e-6);
}

// The adapters' dropout on: the gradient is the derivative of the dropped loss (central
// difference along the normalized gradient: the masks are the same in every forward), and the
// loss differs from the undropped one.
TEST_P(LoraPassTest, DropoutGradientMatchesFiniteDifferences) {
  const std::unique_ptr<m::Lora> dropped = MakeLora(0.2f);
  const PassOptions o = WithDropout();
  std::vector<float> g, scratch;
  const Result r = Lora(pool_, g, o, dropped.get());
  const std::unique_ptr<m::Lora> undropped = MakeLora(0.f);
  EXPECT_NE(Lora(pool_, scratch, o, undropped.get()).loss, r.loss);
  double norm = 0;
  for (float v : g) norm += static_cast<double>(v) * v;
  norm = std::sqrt(norm);
  ASSERT_GT(norm, 0);
  // h = 1e-3: Gemma 3's RMSNorms of small q/k heads curve the loss so that h = 1e-2's truncation
  // error was 44% there (3e-3: 0.7%, 1e-3: 0.2%, 3e-4: 0.03%: it shrinks with h, the gradient is
  // right); Qwen2's 1% at 1e-2. The loss is summed in double, so 1e-3 keeps rounding well below.
  const double h = 1e-3;
  const std::vector<float> saved = lora_params_;
  auto loss_at = [&](double t) {
    for (std::size_t i = 0; i < g.size(); ++i)
      lora_params_[i] = static_cast<float>(saved[i] + t * g[i] / norm);
    return Lora(pool_, scratch, o, dropped.get()).loss * o.dloss;  // the mean loss
  };
  const double num = (loss_at(h) - loss_at(-h)) / (2 * h);
  lora_params_ = saved;
  std::printf("[measured] %s: dropout directional derivative %.6g, |grad| %.6g (rel %.3g)\n",
              GetParam().name.c_str(), num, norm, std::fabs(num - norm) / norm);
  EXPECT_NEAR(num, norm, 1e-2 * norm);
}

// Any placement drops the same elements: two rows in one pass, or one row per pass (row0 0 and
// 1, accumulated), give the same loss and gradients.
TEST_P(LoraPassTest, DropoutDoesNotDependOnPlacement) {
  const std::unique_ptr<m::Lora> dropped = MakeLora(0.2f);
  PassOptions o = WithDropout();
  std::vector<float> whole, split;
  const Result w = Lora(pool_, whole, o, dropped.get());
  o.B = 1;
  const Result first = Lora(pool_, split, o, dropped.get());
  o.row0 = 1;
  o.accumulate = true;
  const Result second = Lora(pool_, split, o, dropped.get());
  EXPECT_NEAR(first.loss + second.loss, w.loss, 1e-6 * std::fabs(w.loss));
  EXPECT_LT(RelErr(split.data(), whole.data(), whole.size()), 1e-5);
}

// Generation runs the merged model: a KV cache with adapters is refused.
TEST_P(LoraPassTest, RefusesTheKvCache) {
  const m::Shape& s = base_layout_->shape();
  if (s.encoder()) GTEST_SKIP() << "encoders have no KV cache";
  m::Activations acts(s, 1, 1, pool_.size());
  std::vector<float> mem(acts.floats(), 0.f);
  std::vector<int> tokens(m::Activations::TokenInts(s, 1, 1), 1);
  acts.Bind(mem.data(), tokens.data());
  std::vector<float> lora_acts(lora_->ActFloats(1, 1));
  const m::LoraPass pass{lora_.get(), lora_params_.data(), lora_acts.data()};
  m::KvCache cache(s, pool_.size());
  EXPECT_THROW(
      m::Forward(pool_, *base_layout_, base_.data(), acts, 1, 1, false, nullptr, &cache, &pass),
      RuntimeError);
}

INSTANTIATE_TEST_SUITE_P(Families, LoraPassTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

}  // namespace
}  // namespace cputrain
