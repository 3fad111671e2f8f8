// The AddressSanitizer red zones inside the flat buffers (design: model/transformer.h, Activations,
// and alloc/backend_direct.cc). Under ASan these prove that a kernel running off the end of one
// activation into the next, or off the end of a NodeBuffer (the parameter buffer past total()),
// is reported, and that Forward leaves every gap between activations poisoned and every view
// usable. In every build they prove the activation layout: views 64-byte aligned, red zones only
// under ASan (so the normal build's layout is what it always was).
//
// The death tests need ASan and are skipped without it; CI runs this binary in build-asan.
#include <gtest/gtest.h>
#include <sanitizer/asan_interface.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "alloc/numa_alloc.h"
#include "kernels/kernels.h"
#include "model/transformer.h"
#include "runtime/worker_pool.h"

#if __has_feature(address_sanitizer) || defined(__SANITIZE_ADDRESS__)
#define CPUTRAIN_TEST_ASAN 1
#else
#define CPUTRAIN_TEST_ASAN 0
#endif

namespace cputrain::model {
namespace {

constexpr std::size_t kRedZone = CPUTRAIN_TEST_ASAN ? 16 : 0;  // floats after each view
constexpr char kNoAsan[] = "needs AddressSanitizer: build with -DCPUTRAIN_SANITIZE=address";
constexpr char kReport[] = "AddressSanitizer: use-after-poison";

std::size_t Round16(std::size_t n) { return (n + 15) / 16 * 16; }

// A small model whose sizes are not multiples of 16 everywhere: N = B*T = 10 rows, so the
// (B,T) views have 6 floats of padding before their red zone.
Shape TinyShape() {
  Shape s;
  s.maxT = 8, s.V = 50, s.Vp = Shape::PadVocab(50), s.L = 2, s.NH = 2, s.C = 24;
  return s;
}
constexpr int kB = 2, kT = 5, kThreads = 2;
constexpr std::size_t kN = static_cast<std::size_t>(kB) * kT;

// Writes n floats from p, as a kernel with a wrong bound would. Not inlined, so the compiler
// cannot see the overrun and drop it.
[[gnu::noinline]] void WriteFloats(float* p, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) p[i] = 1.0f;
}

void ConfigureAlloc() {
  alloc::Options o;
  o.bind = false;
  o.no_bind_reason = "asan_poison_test: placement is not what this test checks";
  alloc::Configure(o);
}

// Parameters, activations and tokens of TinyShape on node 0, after one Forward with loss.
struct ForwardedModel {
  ParamLayout layout{TinyShape()};
  WorkerPool pool{std::vector<int>(kThreads, 0), nullptr, "asan"};
  alloc::NodeBuffer<float> params, acts_mem;
  alloc::NodeBuffer<int> tokens;
  Activations acts{TinyShape(), kB, kT, kThreads};

  ForwardedModel() {
    ConfigureAlloc();
    kernels::InitBlas();
    params = alloc::NodeBuffer<float>(0, layout.total());
    acts_mem = alloc::NodeBuffer<float>(0, acts.floats());
    tokens = alloc::NodeBuffer<int>(0, 2 * kN);
    acts.Bind(acts_mem.data(), tokens.data());
    // First touch of the whole buffer, as the trainer does, is allowed before the first Forward.
    std::fill(acts_mem.begin(), acts_mem.end(), 0.0f);
    for (std::size_t i = 0; i < 2 * kN; ++i) tokens[i] = static_cast<int>(i * 7 % 50);
    pool.Run([&] { RandomInit(pool, layout, 1, params.data()); });
    pool.Run([&] { Forward(pool, layout, params.data(), acts, kB, kT, true); });
  }
};

TEST(ActivationLayout, ViewsAreCacheLineAlignedWithRedZonesOnlyUnderAsan) {
  const Shape s = TinyShape();
  Activations a(s, kB, kT, kThreads);
  std::vector<float> mem(a.floats());
  std::vector<int> tokens(2 * kN);
  a.Bind(mem.data(), tokens.data());
  const float* base = mem.data();
  const std::size_t NC = kN * s.C;
  // Consecutive views: each is its size rounded to 16 floats, plus the red zone, past the last.
  // After the embeddings: the activation output every layer shares (recomputed in the backward),
  // then the projection output they share (no post-norms here), then the layers' own views.
  const std::size_t NF = kN * s.ffn();
  EXPECT_EQ(a.layers[0].fch_gelu - a.encoded, static_cast<std::ptrdiff_t>(Round16(NC) + kRedZone));
  EXPECT_EQ(a.layers[0].attproj - a.layers[0].fch_gelu,
            static_cast<std::ptrdiff_t>(Round16(NF) + kRedZone));
  EXPECT_EQ(a.layers[0].ln1 - a.layers[0].attproj,
            static_cast<std::ptrdiff_t>(Round16(NC) + kRedZone));
  for (const Activations::Layer& l : a.layers) {
    EXPECT_EQ(l.fch_gelu, a.layers[0].fch_gelu);
    EXPECT_EQ(l.attproj, a.layers[0].attproj);
    EXPECT_EQ(l.fcproj, a.layers[0].attproj);
  }
  EXPECT_EQ(a.layers[0].ln1_mean - a.layers[0].ln1,
            static_cast<std::ptrdiff_t>(Round16(NC) + kRedZone));
  EXPECT_EQ(a.layers[0].ln1_rstd - a.layers[0].ln1_mean,
            static_cast<std::ptrdiff_t>(Round16(kN) + kRedZone));
  EXPECT_EQ(a.layers[1].ln1 - a.layers[0].residual3,
            static_cast<std::ptrdiff_t>(Round16(NC) + kRedZone));
  EXPECT_EQ(a.floats(), static_cast<std::size_t>(a.att_scratch - base) +
                            Round16(kernels::AttentionScratchFloats(kThreads, kT)) + kRedZone);
  for (const float* p :
       {a.encoded, a.layers[1].att, a.layers[1].ln2_rstd, a.logits, a.dfch, a.att_scratch}) {
    EXPECT_EQ((p - base) % 16, 0) << "view at float " << (p - base);
  }
}

TEST(AsanPoison, ForwardLeavesEveryGapBetweenActivationsPoisoned) {
  if (!CPUTRAIN_TEST_ASAN) GTEST_SKIP() << kNoAsan;
#if CPUTRAIN_TEST_ASAN
  ForwardedModel m;
  const std::size_t NC = kN * m.layout.shape().C;
  struct View {
    const char* name;
    float* p;
    std::size_t n;
  };
  const Activations::Layer& A = m.acts.layers[1];
  for (const View& v : {View{"encoded", m.acts.encoded, NC}, View{"ln1_mean", A.ln1_mean, kN},
                        View{"qkv", A.qkv, 3 * NC}, View{"residual3", A.residual3, NC},
                        View{"losses", m.acts.losses, kN}}) {
    EXPECT_EQ(__asan_region_is_poisoned(v.p, v.n * sizeof(float)), nullptr) << v.name;
    const std::size_t gap = Round16(v.n) + kRedZone - v.n;
    for (std::size_t i = v.n; i < v.n + gap; ++i) {
      EXPECT_TRUE(__asan_address_is_poisoned(v.p + i)) << v.name << "[" << i << "]";
    }
  }
  // Past the last view: att_scratch's red zone ends the buffer.
  EXPECT_TRUE(__asan_address_is_poisoned(m.acts_mem.data() + m.acts.floats() - 1));
#endif
}

TEST(AsanPoison, OverrunOfOneActivationIntoTheNextIsReported) {
  if (!CPUTRAIN_TEST_ASAN) GTEST_SKIP() << kNoAsan;
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the model's worker pool runs threads
  ForwardedModel m;
  const std::size_t NC = kN * m.layout.shape().C;
  Activations::Layer& A = m.acts.layers[0];
  // One float too many: ln1 (a multiple of 16 floats) runs into its red zone, before ln1_mean.
  EXPECT_DEATH(WriteFloats(A.ln1, NC + 1), kReport);
  // ln1_mean (10 floats) runs into its padding.
  EXPECT_DEATH(WriteFloats(A.ln1_mean, kN + 1), kReport);
  // Within bounds nothing is reported.
  WriteFloats(A.ln1, NC);
  WriteFloats(A.ln1_mean, kN);
}

TEST(AsanPoison, OverrunPastTheEndOfANodeBufferIsReported) {
  if (!CPUTRAIN_TEST_ASAN) GTEST_SKIP() << kNoAsan;
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // ASan's own threads may be running
  ConfigureAlloc();
  ParamLayout layout(TinyShape());
  alloc::NodeBuffer<float> params(0, layout.total());
  WriteFloats(params.data(), layout.total());
  EXPECT_DEATH(WriteFloats(params.data(), layout.total() + 1), kReport);
  // A whole number of pages still gets a poisoned tail (an extra page is mapped for it).
  alloc::NodeBuffer<float> page(0, 1024);
  WriteFloats(page.data(), 1024);
  EXPECT_DEATH(WriteFloats(page.data(), 1025), kReport);
}

TEST(AsanPoison, HugePageRoundingIsPoisonedAndFreeUnpoisons) {
  if (!CPUTRAIN_TEST_ASAN) GTEST_SKIP() << kNoAsan;
#if CPUTRAIN_TEST_ASAN
  alloc::Options o;
  o.bind = false;
  o.no_bind_reason = "asan_poison_test: placement is not what this test checks";
  o.huge_pages = true;
  alloc::Configure(o);
  const std::size_t bytes = alloc::kHugePageBytes + 100;  // rounded up to 2 huge pages
  char* p = static_cast<char*>(alloc::AllocateOnNode(0, bytes));
  EXPECT_EQ(__asan_region_is_poisoned(p, bytes), nullptr);
  EXPECT_EQ(__asan_region_is_poisoned(p, bytes + 1), p + bytes);
  EXPECT_TRUE(__asan_address_is_poisoned(p + 2 * alloc::kHugePageBytes - 1));
  alloc::FreeOnNode(p);
  // A later mapping may reuse the addresses: none of them may stay poisoned.
  EXPECT_EQ(__asan_region_is_poisoned(p, 2 * alloc::kHugePageBytes), nullptr);
#endif
}

}  // namespace
}  // namespace cputrain::model
