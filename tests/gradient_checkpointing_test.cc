// Gradient checkpointing (model/transformer.h, Activations): the passes over checkpointed
// activations — each block's output kept, the rest recomputed in the backward — must give the
// stored path's loss and every gradient bit for bit, since they run the same kernels in the same
// order. Checked for every family (GPT-2, Llama, Qwen2, Qwen3, Mistral, Gemma 3, Phi-3 with their
// windows, q/k norms, post-norms and head sizes; BERT's span head and DistilBERT's unpadded
// classifier), in fp32 and bf16 (the portable tile model where this CPU has no bf16 kernel), full
// and LoRA (the adapters' dropout on), packed rows, and gradient accumulation. The checkpointed
// activations must also be smaller, so that a flag that silently kept every layer fails.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "family_shapes.h"
#include "kernels/bf16.h"
#include "kernels/kernels.h"
#include "model/lora.h"
#include "model/params.h"
#include "model/transformer.h"
#include "pass_buffers.h"
#include "runtime/worker_pool.h"

namespace cputrain {
namespace {

namespace m = model;

constexpr int kB = 2, kT = 12;

struct Case {
  const char* name;
  m::Shape shape;
  bool bf16 = false, lora = false, packed = false, accumulate = false;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// Decoder rows: inputs and targets; packed rows hold two documents each (positions restart at
// the second). Encoder rows: each row's real length, types and labels (a span head's start and
// end, a classifier's label).
std::vector<int> Tokens(const m::Shape& s) {
  const std::size_t N = static_cast<std::size_t>(kB) * kT;
  std::vector<int> tok(m::Activations::TokenInts(s, kB, kT), 0);
  const bool enc = s.encoder();
  const int lengths[kB] = {kT, 7};
  for (int b = 0; b < kB; ++b) {
    for (int t = 0; t < kT; ++t) {
      const std::size_t i = static_cast<std::size_t>(b) * kT + t;
      const bool real = !enc || t < lengths[b];
      tok[i] = real ? 1 + (b * 37 + t * 11 + 3) % (s.V - 1) : 0;
      tok[N + i] = enc ? (s.types > 0 && t > 2 && real ? 1 : 0) : (b * 5 + t * 13 + 1) % s.V;
    }
    if (s.head != m::Head::kLm) {
      tok[2 * N + b] = enc ? lengths[b] : kT;
      tok[2 * N + kB + b] = s.head == m::Head::kSpan ? 2 + b : b % std::max(s.labels, 1);
      tok[2 * N + 2 * kB + b] = 4 + b;  // a span's end
    }
  }
  return tok;
}

struct Result {
  double loss = 0;
  std::vector<float> grads;
  std::size_t act_floats = 0;
};

// Forward and Backward of one step (two micro-batches into the same gradients with accumulate).
Result Step(WorkerPool& pool, const Case& c, const m::ParamLayout& layout,
            const std::vector<float>& params, const m::Lora* lora,
            const std::vector<float>& lora_params, bool checkpoint) {
  const m::Shape& s = layout.shape();
  m::Activations acts(s, kB, kT, pool.size(), checkpoint);
  EXPECT_EQ(acts.checkpointed(), checkpoint);
  std::vector<float> mem(acts.floats(), 0.f);
  std::vector<int> tokens = Tokens(s);
  acts.Bind(mem.data(), tokens.data());
  acts.dropout = {true, 77, 2};
  if (c.packed) {
    acts.UsePacking();
    for (int b = 0; b < kB; ++b)
      for (int t = 0; t < kT; ++t) {
        const int doc = t < 5 + b ? 0 : 5 + b;
        acts.positions[b * kT + t] = t - doc;
        acts.doc_start[b * kT + t] = doc;
      }
  }
  std::vector<float> lora_acts(lora ? lora->ActFloats(kB, kT) : 0);
  m::LoraPass lp{lora, lora_params.data(), lora_acts.data()};
  const m::LoraPass* lpp = lora ? &lp : nullptr;
  std::unique_ptr<test::Bf16Buffers> b16;
  if (c.bf16) b16 = std::make_unique<test::Bf16Buffers>(pool, layout, params, kB, kT);
  const m::Bf16Operands* ops = b16 ? &b16->ops : nullptr;
  Result r;
  r.act_floats = acts.floats();
  r.grads.assign(lora ? lora->layout().total() : layout.total(), 0.f);
  for (int micro = 0; micro < (c.accumulate ? 2 : 1); ++micro) {
    acts.dropout.seed = 77 + micro;
    for (int i = 0; i < kB * kT; ++i) tokens[i] = (tokens[i] + micro) % s.V;
    r.loss += m::Forward(pool, layout, params.data(), acts, kB, kT, true, ops, nullptr, lpp);
    m::Backward(
        pool, layout, params.data(), r.grads.data(), acts, kB, kT, 1.f / (kB * kT),
        [](std::size_t) {}, micro > 0, ops, lpp);
  }
  return r;
}

class GradientCheckpointingTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    kernels::InitBlas();
    if (GetParam().bf16 && kernels::Bf16Kernels().empty())
      kernels::UseBf16Kernel(kernels::Bf16Kernel::kTileModel, "this test");
  }
  WorkerPool pool_{std::vector<int>(2, 0), nullptr, "ckpt"};
};

TEST_P(GradientCheckpointingTest, GradientsAreTheStoredPathsBitForBit) {
  const Case& c = GetParam();
  ASSERT_EQ(c.shape.Problem(), "");
  const m::ParamLayout layout(c.shape);
  std::vector<float> params(layout.total());
  m::RandomInit(pool_, layout, 5, params.data());
  std::vector<float> lora_params;
  std::unique_ptr<m::Lora> lora =
      c.lora ? test::LiveLora(pool_, layout, params, &lora_params) : nullptr;
  const Result stored = Step(pool_, c, layout, params, lora.get(), lora_params, false);
  const Result ckpt = Step(pool_, c, layout, params, lora.get(), lora_params, true);
  EXPECT_LT(ckpt.act_floats, stored.act_floats) << "checkpointing kept every layer's views";
  EXPECT_EQ(std::memcmp(&ckpt.loss, &stored.loss, sizeof(double)), 0)
      << ckpt.loss << " vs " << stored.loss;
  ASSERT_EQ(ckpt.grads.size(), stored.grads.size());
  std::size_t differ = 0, first = 0, nonzero = 0;
  for (std::size_t i = 0; i < stored.grads.size(); ++i) {
    if (std::memcmp(&ckpt.grads[i], &stored.grads[i], sizeof(float)) != 0 && differ++ == 0)
      first = i;
    nonzero += stored.grads[i] != 0.f;
  }
  EXPECT_EQ(differ, 0u) << "first at " << first << ": " << ckpt.grads[first] << " vs "
                        << stored.grads[first];
  // Most gradients are nonzero (a pass that computed nothing would agree with itself).
  EXPECT_GT(nonzero, stored.grads.size() / 3);
}

m::Shape Gpt2() {
  m::Shape s(16, 60, m::Shape::PadVocab(60), 3, 4, 16);
  return s;
}

m::Shape Llama() { return test::FamilyBase(m::Arch::kLlama); }

m::Shape Span(m::Arch arch) { return test::SmallEncoder(arch); }

m::Shape Classifier(m::Arch arch) { return test::SmallEncoderClassifier(arch); }

m::Shape DecoderClassifier() {
  m::Shape s = test::SmallQwen2();
  s.head = m::Head::kClassify;
  s.labels = 2;
  s.pad_token = 0;
  return s;
}

std::vector<Case> Cases() {
  std::vector<Case> v = {
      {"Gpt2", Gpt2()},
      {"Llama", Llama()},
      {"Qwen2", test::SmallQwen2()},
      {"Qwen3", test::SmallQwen3()},
      {"Mistral", test::SmallMistral()},
      {"Gemma3", test::SmallGemma3()},
      {"Phi3", test::SmallPhi3()},
      {"BertSpan", Span(m::Arch::kBert)},
      {"DistilBertClassifier", Classifier(m::Arch::kDistilBert)},
      {"BertClassifier", Classifier(m::Arch::kBert)},
      {"Qwen2Classifier", DecoderClassifier()},
      {"Gpt2Bf16", Gpt2(), true},
      {"Gemma3Bf16", test::SmallGemma3(), true},
      {"BertSpanBf16", Span(m::Arch::kBert), true},
      {"LlamaLora", Llama(), false, true},
      {"Gemma3LoraBf16", test::SmallGemma3(), true, true},
      {"DistilBertClassifierLora", Classifier(m::Arch::kDistilBert), false, true},
      {"MistralPacked", test::SmallMistral(), false, false, true},
      {"Qwen3PackedBf16", test::SmallQwen3(), true, false, true},
      {"Phi3Accumulate", test::SmallPhi3(), false, false, false, true},
      {"BertSpanLoraAccumulate", Span(m::Arch::kBert), false, true, false, true},
  };
  return v;
}

INSTANTIATE_TEST_SUITE_P(Families, GradientCheckpointingTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

}  // namespace
}  // namespace cputrain
