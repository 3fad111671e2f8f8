// GPT-2 forward/backward against PyTorch (tests/reference/fixtures/*/debug_state.bin): logits,
// loss and all 16 gradient tensors for one batch, with the tolerances tests/reference/README.md
// derives from the fp32 rounding floor (logits rtol 1e-5 + atol 2e-6, loss 1e-5, gradients
// rtol 1e-4 + atol 1e-6), at several pool sizes; plus layout and determinism properties.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "bf16_kernels.h"
#include "common/error.h"
#include "kernels/bf16.h"
#include "kernels/kernels.h"
#include "model/checkpoint.h"
#include "model/decoder.h"
#include "model/family.h"
#include "model/transformer.h"
#include "runtime/worker_pool.h"

namespace cputrain::model {
namespace {

std::string Fixture(const std::string& name, const std::string& file) {
  return std::string(CPUTRAIN_SOURCE_DIR) + "/tests/reference/fixtures/" + name + "/" + file;
}

struct DebugState {
  int B = 0, T = 0, V = 0, Vp = 0;
  std::vector<int32_t> x, y;
  std::vector<float> logits;  // (B,T,V)
  float loss = 0;
  std::vector<float> grads;  // checkpoint order
};

DebugState ReadDebugState(const std::string& path, std::size_t nparams) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  int32_t h[256];
  in.read(reinterpret_cast<char*>(h), sizeof(h));
  EXPECT_EQ(h[0], 20240327);
  EXPECT_EQ(h[1], 2);
  DebugState d;
  d.B = h[2], d.T = h[3], d.V = h[4], d.Vp = h[5];
  const std::size_t N = static_cast<std::size_t>(d.B) * d.T;
  d.x.resize(N);
  d.y.resize(N);
  d.logits.resize(N * d.V);
  d.grads.resize(nparams);
  in.read(reinterpret_cast<char*>(d.x.data()), N * 4);
  in.read(reinterpret_cast<char*>(d.y.data()), N * 4);
  in.read(reinterpret_cast<char*>(d.logits.data()), d.logits.size() * 4);
  in.read(reinterpret_cast<char*>(&d.loss), 4);
  in.read(reinterpret_cast<char*>(d.grads.data()), nparams * 4);
  EXPECT_TRUE(in) << path << " is short";
  return d;
}

struct TestModel {
  ParamLayout layout;
  std::vector<float> params, grads, acts_mem;
  std::vector<int> tokens;
  Activations acts;
  double loss_sum = 0;
  std::vector<std::size_t> ready;

  TestModel(const Shape& s, int B, int T, int threads)
      : layout(s), params(layout.total()), grads(layout.total(), 0.f), acts(s, B, T, threads) {
    acts_mem.assign(acts.floats(), 0.f);
    tokens.assign(2 * static_cast<std::size_t>(B) * T, 0);
    acts.Bind(acts_mem.data(), tokens.data());
  }
};

class Numerics : public ::testing::TestWithParam<std::tuple<const char*, int>> {
 protected:
  void SetUp() override { kernels::InitBlas(); }
};

TEST_P(Numerics, LogitsLossAndEveryGradientMatchPyTorch) {
  const auto [name, threads] = GetParam();
  const Shape s = ReadCheckpointShape(Fixture(name, "model.bin"));
  ParamLayout layout(s);
  DebugState d = ReadDebugState(Fixture(name, "debug_state.bin"), layout.total());
  ASSERT_EQ(d.V, s.V);
  ASSERT_EQ(d.Vp, s.Vp);
  WorkerPool pool(std::vector<int>(threads, 0), nullptr, "num");
  TestModel r(s, d.B, d.T, threads);
  LoadCheckpoint(Fixture(name, "model.bin"), r.layout, r.params.data());
  const std::size_t N = static_cast<std::size_t>(d.B) * d.T;
  std::copy(d.x.begin(), d.x.end(), r.acts.inputs);
  std::copy(d.y.begin(), d.y.end(), r.acts.targets);

  const double loss = Forward(pool, r.layout, r.params.data(), r.acts, d.B, d.T, true) / N;
  EXPECT_NEAR(loss, d.loss, 1e-5 * std::fabs(d.loss)) << name;
  double worst_logit = 0;
  for (std::size_t n = 0; n < N; ++n) {
    for (int v = 0; v < s.V; ++v) {
      const float ours = r.acts.logits[n * s.Vp + v], ref = d.logits[n * s.V + v];
      const double excess = std::fabs(ours - ref) - (1e-5 * std::fabs(ref) + 2e-6);
      worst_logit = std::max(worst_logit, excess);
      ASSERT_LE(excess, 0) << name << " logit n=" << n << " v=" << v << " ours " << ours
                           << " torch " << ref;
    }
  }

  Backward(pool, r.layout, r.params.data(), r.grads.data(), r.acts, d.B, d.T, 1.0f / N,
           [&](std::size_t from) { r.ready.push_back(from); });
  // Compare every tensor copy; the debug state is in checkpoint order.
  for (const TensorInfo& info : layout.tensors()) {
    const Tensor t = info.t;
    for (int l = 0; l < (info.per_layer ? s.L : 1); ++l) {
      const float* ours = r.grads.data() + layout.offset(t, l);
      const float* ref = d.grads.data() + layout.checkpoint_offset(t, l);
      for (std::size_t i = 0; i < info.numel; ++i) {
        const double tol = 1e-4 * std::fabs(ref[i]) + 1e-6;
        ASSERT_LE(std::fabs(ours[i] - ref[i]), tol)
            << name << " d" << info.name << "[layer " << l << "][" << i << "] ours " << ours[i]
            << " torch " << ref[i];
      }
    }
  }
  // Readiness goes from the end of the buffer to its start: lnf, blocks L-1..0, embeddings.
  ASSERT_EQ(r.ready.size(), static_cast<std::size_t>(s.L) + 2);
  EXPECT_EQ(r.ready.front(), layout.offset(kLnfw));
  for (int l = s.L - 1, i = 1; l >= 0; --l, ++i) EXPECT_EQ(r.ready[i], layout.block_begin(l));
  EXPECT_EQ(r.ready.back(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Numerics,
                         ::testing::Combine(::testing::Values("tiny", "odd"),
                                            ::testing::Values(1, 2, 3)));

// train.precision: bf16, one batch (the step-0 batch of fixtures/bf16, which PyTorch ran under
// torch.autocast): the loss within 2e-3 of autocast's, and every gradient tensor's error,
// max|ours - ref| / max|ref|, reported and bounded against both autocast's gradients and the fp32
// ones (fixtures/odd: the same model and batch). Against fp32 the error must also be at least
// 3e-4: bf16 operands move every tensor's gradient by 1e-3..7e-3 here (the generator measured
// 1.6e-3..6.9e-3 for autocast), an fp32 engine by ~1e-7, so a run that silently fell back to fp32
// fails. The bound is per tensor (all layers' copies together), as the generator reports it.
struct TensorErrors {
  double vs_autocast = 0, vs_fp32 = 0;
};

// Once per bf16 kernel (tests/bf16_kernels.h): the tile model runs it on every CPU.
class Gpt2Bf16 : public ::testing::TestWithParam<kernels::Bf16Kernel> {};

TEST_P(Gpt2Bf16, OneBatchIsWithinBf16OfAutocastAndOfFp32) {
  if (const std::string why = test::ActivateBf16Kernel(GetParam()); !why.empty()) {
    GTEST_SKIP() << why;
  }
  kernels::InitBlas();
  const Shape s = ReadCheckpointShape(Fixture("bf16", "model.bin"));
  ParamLayout layout(s);
  const DebugState autocast = ReadDebugState(Fixture("bf16", "debug_state.bin"), layout.total());
  const DebugState fp32 = ReadDebugState(Fixture("odd", "debug_state.bin"), layout.total());
  ASSERT_EQ(autocast.x, fp32.x);  // the same batch through the same model.bin
  for (int threads : {1, 3}) {
    WorkerPool pool(std::vector<int>(threads, 0), nullptr, "bf16");
    TestModel r(s, autocast.B, autocast.T, threads);
    LoadCheckpoint(Fixture("bf16", "model.bin"), r.layout, r.params.data());
    std::vector<uint16_t> weights(layout.total()),
        in(Bf16Operands::InElems(s, autocast.B, autocast.T)),
        dout(Bf16Operands::DoutElems(s, autocast.B, autocast.T)),
        attn(Bf16Operands::AttnElems(threads, autocast.T));
    kernels::ConvertToBf16(pool, weights.data(), r.params.data(), layout.total());
    const Bf16Operands ops{weights.data(), in.data(), dout.data(), attn.data()};
    const std::size_t N = static_cast<std::size_t>(autocast.B) * autocast.T;
    std::copy(autocast.x.begin(), autocast.x.end(), r.acts.inputs);
    std::copy(autocast.y.begin(), autocast.y.end(), r.acts.targets);
    const double loss =
        Forward(pool, layout, r.params.data(), r.acts, autocast.B, autocast.T, true, &ops) / N;
    EXPECT_NEAR(loss, autocast.loss, 2e-3 * autocast.loss);
    Backward(
        pool, layout, r.params.data(), r.grads.data(), r.acts, autocast.B, autocast.T, 1.0f / N,
        [](std::size_t) {}, false, &ops);
    std::printf("bf16 step-0 gradients, %d thread(s): loss %.7f (autocast %.7f, fp32 %.7f)\n",
                threads, loss, autocast.loss, fp32.loss);
    for (const TensorInfo& info : layout.tensors()) {
      const Tensor t = info.t;
      double diff_a = 0, diff_f = 0, max_a = 0, max_f = 0;
      for (int l = 0; l < (info.per_layer ? s.L : 1); ++l) {
        const float* ours = r.grads.data() + layout.offset(t, l);
        const std::size_t at = layout.checkpoint_offset(t, l);
        for (std::size_t i = 0; i < info.numel; ++i) {
          diff_a = std::max(diff_a, std::fabs(double(ours[i]) - autocast.grads[at + i]));
          diff_f = std::max(diff_f, std::fabs(double(ours[i]) - fp32.grads[at + i]));
          max_a = std::max(max_a, std::fabs(double(autocast.grads[at + i])));
          max_f = std::max(max_f, std::fabs(double(fp32.grads[at + i])));
        }
      }
      const TensorErrors e{diff_a / max_a, diff_f / max_f};
      std::printf("  d%-9s vs autocast %.2e  vs fp32 %.2e\n", info.name, e.vs_autocast, e.vs_fp32);
      EXPECT_LT(e.vs_autocast, 2e-2) << "d" << info.name;
      EXPECT_LT(e.vs_fp32, 2e-2) << "d" << info.name;
      EXPECT_GT(e.vs_fp32, 3e-4) << "d" << info.name << ": as close to fp32 as fp32 itself";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllKernels, Gpt2Bf16, test::AllBf16Kernels(), test::Bf16KernelTestName);

// Backward writes gradients (it does not accumulate): a second pass gives the same bits, and a
// different pool size gives the same loss to rounding.
TEST(Gpt2, BackwardIsRepeatableAndWritesRatherThanAdds) {
  kernels::InitBlas();
  const Shape s = ReadCheckpointShape(Fixture("odd", "model.bin"));
  DebugState d = ReadDebugState(Fixture("odd", "debug_state.bin"), ParamLayout(s).total());
  WorkerPool pool(std::vector<int>(2, 0), nullptr, "rep");
  TestModel r(s, d.B, d.T, 2);
  LoadCheckpoint(Fixture("odd", "model.bin"), r.layout, r.params.data());
  std::copy(d.x.begin(), d.x.end(), r.acts.inputs);
  std::copy(d.y.begin(), d.y.end(), r.acts.targets);
  std::vector<std::vector<float>> passes;
  for (int pass = 0; pass < 2; ++pass) {
    Forward(pool, r.layout, r.params.data(), r.acts, d.B, d.T, true);
    Backward(pool, r.layout, r.params.data(), r.grads.data(), r.acts, d.B, d.T, 0.01f,
             [](std::size_t) {});
    passes.push_back(r.grads);
  }
  EXPECT_EQ(passes[0], passes[1]);
  // Padding rows of wte get no gradient.
  for (std::size_t i = static_cast<std::size_t>(s.V) * s.C;
       i < static_cast<std::size_t>(s.Vp) * s.C; ++i) {
    ASSERT_EQ(passes[0][r.layout.offset(kWte) + i], 0.f);
  }
}

TEST(Gpt2, LayoutIsAPermutationOfTheCheckpointOrder) {
  Shape s{40, 300, 384, 3, 3, 48};
  ParamLayout layout(s);
  std::vector<int> hit(layout.total(), 0);
  std::size_t covered = 0;
  for (const TensorInfo& info : layout.tensors()) {
    const Tensor t = info.t;
    for (int l = 0; l < (info.per_layer ? s.L : 1); ++l) {
      for (std::size_t i = 0; i < info.numel; ++i) {
        ++hit[layout.offset(t, l) + i];
      }
      covered += info.numel;
    }
  }
  EXPECT_EQ(covered, layout.total());
  for (int h : hit) ASSERT_EQ(h, 1);
  // Decay segments cover the buffer in order and decay exactly the 2-D tensors.
  std::size_t pos = 0, decayed = 0;
  for (const auto& seg : layout.segments()) {
    EXPECT_EQ(seg.begin, pos);
    pos = seg.end;
    if (seg.decay) decayed += seg.end - seg.begin;
  }
  EXPECT_EQ(pos, layout.total());
  const std::size_t C = 48, L = 3;
  EXPECT_EQ(decayed, 384 * C + 40 * C + L * (3 * C * C + C * C + 4 * C * C + 4 * C * C));
}

// Regression: a checkpoint (or config) with C=600000000 overflowed the int 4*C in the tensor
// table (UBSan: signed overflow) and printed a wrong size. Sizes are now size_t, and the shape
// is refused with its bound before a layout is built.
TEST(Gpt2, SixHundredMillionChannelsOverflowedFourC) {
  Shape s{64, 256, 256, 1, 1, 600'000'000};
  const auto table = FamilyOf(Arch::kGpt2).tensors(s);  // llm.c's order: table[t] is tensor t
  EXPECT_EQ(table[kFcw].shape, (std::vector<std::size_t>{2'400'000'000u, 600'000'000u}));
  EXPECT_EQ(table[kFcw].numel, std::size_t{2'400'000'000u} * 600'000'000u);
  EXPECT_EQ(s.Problem(), "C is 600000000: it must be in [1, 65536]");
  EXPECT_THROW(ParamLayout{s}, InputError);
}

// Regression: a header claiming L=1e9 sized memory (std::bad_alloc) before anything checked it.
TEST(Gpt2, ShapeProblemsAreFoundWithoutAllocating) {
  Shape ok{1024, 50257, 50304, 12, 12, 768};
  EXPECT_EQ(ok.Problem(), "");
  EXPECT_EQ(ok.ParamCount(), ParamLayout(ok).total());
  EXPECT_EQ(ok.ParamCount(), 124475904u);  // GPT-2 124M with the padded vocabulary
  Shape s = ok;
  s.L = 1'000'000'000;
  EXPECT_EQ(s.Problem(), "L is 1000000000: it must be in [1, 4096]");
  s = ok;
  s.NH = 5;
  EXPECT_EQ(s.Problem(), "NH (5) does not divide C (768)");
  s = ok;
  s.Vp = 100;
  EXPECT_EQ(s.Problem(), "the padded vocabulary Vp (100) is smaller than V (50257)");
  s = ok;
  s.C = -768;
  EXPECT_EQ(s.Problem(), "C is -768: it must be in [1, 65536]");
  // Every dimension within its bound, the product above 2^40 parameters.
  Shape big{65536, 65536, 65536, 4096, 1, 65536};
  EXPECT_NE(big.Problem().find("parameters are more than the 1099511627776 (2^40)"),
            std::string::npos)
      << big.Problem();
}

// Generation's KV cache holds the positions fed, not the model's maxT (131,072 for Llama 3.1):
// it starts at 1024 and doubles, each layer's rows moved to the new layout, up to maxT.
TEST(KvCache, GrowsByDoublingUpToMaxTAndKeepsEveryLayersRows) {
  const Shape s{3000, 64, 64, 2, 2, 16};
  KvCache c(s, 3);
  ASSERT_EQ(c.capacity, 1024);
  ASSERT_EQ(c.row, 16u);
  EXPECT_EQ(c.k.size(), 2u * 1024 * 16);
  EXPECT_EQ(c.scratch.size(), 3u * 1024);
  auto value = [](int l, int p, int i, int kv) {
    return static_cast<float>(((l * 4096 + p) * 16 + i) * 2 + kv);
  };
  const int filled = 1000;
  for (int l = 0; l < 2; ++l)
    for (int p = 0; p < filled; ++p)
      for (int i = 0; i < 16; ++i) {
        const std::size_t at = (static_cast<std::size_t>(l) * c.capacity + p) * 16 + i;
        c.k[at] = value(l, p, i, 0);
        c.v[at] = value(l, p, i, 1);
      }
  c.positions = filled;
  c.Reserve(1024);  // fits: nothing moves
  EXPECT_EQ(c.capacity, 1024);
  c.Reserve(1025);
  EXPECT_EQ(c.capacity, 2048);
  c.Reserve(2500);  // doubling past maxT stops at maxT
  EXPECT_EQ(c.capacity, 3000);
  EXPECT_EQ(c.k.size(), 2u * 3000 * 16);
  EXPECT_EQ(c.scratch.size(), 3u * 3000);
  for (int l = 0; l < 2; ++l)
    for (int p = 0; p < filled; ++p)
      for (int i = 0; i < 16; ++i) {
        const std::size_t at = (static_cast<std::size_t>(l) * 3000 + p) * 16 + i;
        ASSERT_EQ(c.k[at], value(l, p, i, 0)) << l << " " << p << " " << i;
        ASSERT_EQ(c.v[at], value(l, p, i, 1)) << l << " " << p << " " << i;
      }
}

// Regression: the attention buffer (B,NH,T,T) of a huge batch wrapped around size_t in
// Activations' offsets (B=2^31-1, T=65536), sizing a small buffer for a huge model run.
TEST(Gpt2, HugeBatchActivationSizesWrappedAround) {
  const Shape s{65536, 256, 256, 1, 64, 64};
  EXPECT_THROW(Activations(s, 2147483647, 65536, 1), InputError);
  EXPECT_THROW(Activations(s, 4096, 65536, 1), InputError);
  EXPECT_NO_THROW(Activations(s, 4, 64, 2));
}

TEST(Gpt2, RandomInitIsGpt2AndIndependentOfThreads) {
  Shape s{64, 300, 384, 4, 4, 64};
  ParamLayout layout(s);
  std::vector<float> a(layout.total()), b(layout.total());
  WorkerPool p1(std::vector<int>(1, 0), nullptr, "i1"), p3(std::vector<int>(3, 0), nullptr, "i3");
  RandomInit(p1, layout, 42, a.data());
  RandomInit(p3, layout, 42, b.data());
  EXPECT_EQ(a, b);
  auto stats = [&](Tensor t, int l, std::size_t n) {
    const float* p = a.data() + layout.offset(t, l);
    double s1 = 0, s2 = 0;
    for (std::size_t i = 0; i < n; ++i) s1 += p[i], s2 += double(p[i]) * p[i];
    return std::pair<double, double>{s1 / n, std::sqrt(s2 / n - (s1 / n) * (s1 / n))};
  };
  auto [m_wte, sd_wte] = stats(kWte, 0, 300 * 64);
  EXPECT_NEAR(m_wte, 0, 0.001);
  EXPECT_NEAR(sd_wte, 0.02, 0.0005);
  auto [m_res, sd_res] = stats(kFcprojw, 2, 64 * 256);
  EXPECT_NEAR(sd_res, 0.02 / std::sqrt(8.0), 0.0003);
  EXPECT_EQ(a[layout.offset(kLn1w, 1)], 1.f);
  EXPECT_EQ(a[layout.offset(kQkvb, 3)], 0.f);
  for (std::size_t i = 300 * 64; i < 384 * 64; ++i) ASSERT_EQ(a[layout.offset(kWte) + i], 0.f);
  std::vector<float> c(layout.total());
  RandomInit(p1, layout, 43, c.data());
  EXPECT_NE(a, c);
}

// The KV-cache decoder gives, one position at a time, the logits Forward gives for the whole
// sequence (the same arithmetic up to summation order: 1e-4 absolute on O(1) logits).
TEST(Decoder, MatchesForwardAtEveryPosition) {
  kernels::InitBlas();
  const Shape s = ReadCheckpointShape(Fixture("odd", "model.bin"));
  DebugState d = ReadDebugState(Fixture("odd", "debug_state.bin"), ParamLayout(s).total());
  WorkerPool pool(std::vector<int>(2, 0), nullptr, "dec");
  const int T = d.T;
  TestModel r(s, 1, T, 2);
  LoadCheckpoint(Fixture("odd", "model.bin"), r.layout, r.params.data());
  std::copy(d.x.begin(), d.x.begin() + T, r.acts.inputs);
  Forward(pool, r.layout, r.params.data(), r.acts, 1, T, false);
  pool.Run([&] {
    Decoder dec(pool, r.layout, r.params.data());
    for (int t = 0; t < T; ++t) {
      const float* logits = dec.Feed(d.x[t]);
      for (int v = 0; v < s.V; ++v) {
        ASSERT_NEAR(logits[v], r.acts.logits[static_cast<std::size_t>(t) * s.Vp + v], 1e-4)
            << "position " << t << " token " << v;
      }
    }
    EXPECT_EQ(dec.position(), T);
  });
}

TEST(Decoder, SamplerIsGreedyAtZeroTemperatureAndRespectsTopK) {
  std::vector<float> logits = {0.1f, 3.0f, -1.0f, 2.9f, 0.0f};
  Sampler greedy(0.0f, 0, 1);
  EXPECT_EQ(greedy.Next(logits.data(), 5), 1);
  Sampler top2(1.0f, 2, 7);
  for (int i = 0; i < 200; ++i) {
    const int t = top2.Next(logits.data(), 5);
    ASSERT_TRUE(t == 1 || t == 3) << t;
  }
}

// Probabilities 0.5, 0.3, 0.15, 0.05 (ids shuffled): top_p 0.75 keeps the two most likely
// (0.5 < 0.75 <= 0.8) and draws them 5:3; top_p 0.4 keeps only the first; a seed repeats.
TEST(Decoder, SamplerTopPKeepsTheNucleusInProportionAndRepeatsWithTheSeed) {
  const std::vector<float> logits = {std::log(0.15f), std::log(0.5f), std::log(0.05f),
                                     std::log(0.3f)};
  Sampler nucleus(1.0f, 0, 11, 0.75f);
  int first = 0, n = 4000;
  std::vector<int> drawn;
  for (int i = 0; i < n; ++i) {
    const int t = nucleus.Next(logits.data(), 4);
    ASSERT_TRUE(t == 1 || t == 3) << t;
    first += t == 1;
    drawn.push_back(t);
  }
  EXPECT_NEAR(double(first) / n, 0.625, 0.03);
  Sampler again(1.0f, 0, 11, 0.75f);
  for (int i = 0; i < n; ++i) ASSERT_EQ(again.Next(logits.data(), 4), drawn[i]) << i;
  Sampler narrow(1.0f, 0, 3, 0.4f);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(narrow.Next(logits.data(), 4), 1);
}

}  // namespace
}  // namespace cputrain::model
