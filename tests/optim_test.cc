// AdamW's update: per element the float operations of torch.optim.AdamW (checked against the
// formula evaluated in double), and the same bits for an element wherever the buffer is cut —
// by the pool's thread ranges or by ZeRO-1 shards — since the 8-lane body and its padded tail
// are one piece of code. (Training parity with PyTorch itself is in train_test.)
#include "optim/optim.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/vmath.h"
#include "model/transformer.h"
#include "runtime/worker_pool.h"

namespace cputrain::optim {
namespace {

model::Shape OddShape() {  // sizes that are not multiples of 8 anywhere
  model::Shape s;
  s.maxT = 13;
  s.V = 37;
  s.Vp = model::Shape::PadVocab(s.V);
  s.L = 2;
  s.NH = 3;
  s.C = 9;
  return s;
}

struct State {
  std::vector<float> p, g, m, v;
};

State RandomState(std::size_t n) {
  std::mt19937 rng(7);
  std::normal_distribution<float> d(0.f, 1.f);
  State s{std::vector<float>(n), std::vector<float>(n), std::vector<float>(n),
          std::vector<float>(n)};
  for (std::size_t i = 0; i < n; ++i) {
    s.p[i] = d(rng);
    s.g[i] = d(rng) * 0.1f;
    s.m[i] = d(rng) * 0.01f;
    s.v[i] = std::fabs(d(rng)) * 1e-3f;
  }
  return s;
}

const AdamWStep kStep{3e-3, 0.9, 0.95, 1e-8, 0.1, 5, 0.75f};

// Runs AdamW over [0, n) cut into `shards` ZeRO-1 shards, each on a pool of `threads`.
State Update(const model::ParamLayout& layout, int threads, int shards) {
  const std::size_t n = layout.total();
  State s = RandomState(n);
  WorkerPool pool(std::vector<int>(static_cast<std::size_t>(threads), 0), nullptr, "adamw");
  for (int k = 0; k < shards; ++k) {
    const std::size_t lo = n * k / shards, hi = n * (k + 1) / shards;
    AdamWUpdate(pool, layout, s.p.data(), s.g.data(), s.m.data() + lo, s.v.data() + lo, lo, hi,
                kStep);
  }
  return s;
}

TEST(AdamW, MatchesTorchsFormulaPerElement) {
  const model::ParamLayout layout(OddShape());
  const State before = RandomState(layout.total());
  const State after = Update(layout, 1, 1);
  const double bc1 = 1 - std::pow(kStep.beta1, kStep.t), bc2 = 1 - std::pow(kStep.beta2, kStep.t);
  std::size_t decayed = 0;
  for (const auto& seg : layout.segments()) {
    for (std::size_t i = seg.begin; i < seg.end; ++i) {
      const double g = double(before.g[i]) * kStep.grad_scale;
      const double m = before.m[i] * kStep.beta1 + g * (1 - kStep.beta1);
      const double v = before.v[i] * kStep.beta2 + g * g * (1 - kStep.beta2);
      double p = before.p[i];
      if (seg.decay) {
        p *= 1 - kStep.lr * kStep.weight_decay;
        ++decayed;
      }
      const double delta = kStep.lr / bc1 * m / (std::sqrt(v) / std::sqrt(bc2) + kStep.eps);
      // fp32 rounds each term to ~6e-8 relative and the terms may cancel: the tolerance is a
      // few float ulps of the terms' magnitudes, not of the result.
      const double m_terms =
          std::fabs(before.m[i] * kStep.beta1) + std::fabs(g * (1 - kStep.beta1));
      EXPECT_NEAR(after.m[i], m, 1e-6 * m_terms) << i;
      EXPECT_NEAR(after.v[i], v, 1e-6 * v) << i;
      EXPECT_NEAR(after.p[i], p - delta, 1e-6 * (std::fabs(p) + std::fabs(delta))) << i;
    }
  }
  EXPECT_GT(decayed, 0u);
  EXPECT_LT(decayed, layout.total());
}

TEST(AdamW, SameBitsWhereverThreadsAndShardsCut) {
  const model::ParamLayout layout(OddShape());
  const State one = Update(layout, 1, 1);
  for (int threads : {2, 3, 5}) {
    for (int shards : {1, 3, 7}) {
      const State other = Update(layout, threads, shards);
      EXPECT_EQ(one.p, other.p) << threads << " threads, " << shards << " shards";
      EXPECT_EQ(one.m, other.m) << threads << " threads, " << shards << " shards";
      EXPECT_EQ(one.v, other.v) << threads << " threads, " << shards << " shards";
    }
  }
}

// train.precision: bf16 refreshes the bf16 weight copy inside AdamW: every updated parameter's
// bf16 is FloatToBf16 of the fp32 result (tails and shard cuts included), and the fp32 results
// are the same bits as without the copy.
TEST(AdamW, Bf16CopyIsTheRoundingOfEveryUpdatedParameter) {
  const model::ParamLayout layout(OddShape());
  const std::size_t n = layout.total();
  const State plain = Update(layout, 1, 1);
  for (int shards : {1, 3}) {
    State s = RandomState(n);
    std::vector<uint16_t> bf16(n, 0xdead);
    WorkerPool pool(std::vector<int>(3, 0), nullptr, "adamw");
    for (int k = 0; k < shards; ++k) {
      const std::size_t lo = n * k / shards, hi = n * (k + 1) / shards;
      AdamWUpdate(pool, layout, s.p.data(), s.g.data(), s.m.data() + lo, s.v.data() + lo, lo, hi,
                  kStep, bf16.data());
    }
    EXPECT_EQ(s.p, plain.p);
    EXPECT_EQ(s.m, plain.m);
    for (std::size_t i = 0; i < n; ++i)
      ASSERT_EQ(bf16[i], kernels::FloatToBf16(s.p[i])) << i << " of " << n << ", " << shards;
  }
  // NaN and infinities round as FloatToBf16 does (the vector path's blend).
  const float odd[8] = {NAN, INFINITY, -INFINITY, 0.f, -0.f, 1e-40f, 3.4e38f, 1.00390625f};
  alignas(16) uint16_t out[8];
  _mm_store_si128(reinterpret_cast<__m128i*>(out), kernels::Bf16x8(_mm256_loadu_ps(odd)));
  for (int i = 0; i < 8; ++i) EXPECT_EQ(out[i], kernels::FloatToBf16(odd[i])) << i;
}

}  // namespace
}  // namespace cputrain::optim
