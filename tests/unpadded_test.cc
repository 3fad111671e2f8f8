// An encoder classifier's passes run on the rows' real positions alone (Activations::Unpad,
// model/encoder.cc): proved equal to the padded passes they replace, for BERT (token types,
// pooler) and DistilBERT (no types, pre_classifier), with every dropout site on (hidden,
// attention probabilities, the head's; LoRA's input dropout), in fp32 and bf16, with and without
// LoRA, and for rows padded by various amounts (a row of one real position, a row with none).
// The loss and every gradient must agree within the reordering of sums the packing brings (the
// weight gradients sum fewer rows, the padded ones exact zeros); the packed pass must also have
// run on fewer rows, so that a packing that silently fell back to the padded pass fails.
// Measured differences are printed ("[measured] ...").
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
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

constexpr int kB = 4, kT = 12;
constexpr int kLengths[kB] = {kT, 5, 1, 9};  // row 0 unpadded; row 2 its [CLS] alone

m::Shape Classifier(m::Arch arch) { return test::SmallEncoderClassifier(arch); }

// Rows of kB: tokens of each real position, padding (id 0) past each row's length.
std::vector<int> Tokens(const m::Shape& s) {
  const std::size_t N = static_cast<std::size_t>(kB) * kT;
  std::vector<int> tok(m::Activations::TokenInts(s, kB, kT), 0);
  for (int b = 0; b < kB; ++b) {
    for (int t = 0; t < kT; ++t) {
      const std::size_t i = static_cast<std::size_t>(b) * kT + t;
      tok[i] = t < kLengths[b] ? 1 + (b * 37 + t * 11 + 3) % (s.V - 1) : 0;
      tok[N + i] = s.types > 0 && t >= kLengths[b] / 2 && t < kLengths[b] ? 1 : 0;
    }
    tok[2 * N + b] = kLengths[b];
    tok[2 * N + kB + b] = b % s.labels;  // the label
  }
  return tok;
}

struct PassResult {
  double loss = 0;
  std::vector<float> grads;
  std::size_t rows = 0;  // the activation rows the pass ran on
};

// Forward and Backward over the batch, packed (unpad) or padded, fp32 or bf16, with or without
// the LoRA (its trainable buffer's gradients then).
PassResult Pass(WorkerPool& pool, const m::ParamLayout& layout, const std::vector<float>& params,
                const m::Lora* lora, const std::vector<float>* lora_params, bool unpad, bool bf16) {
  const m::Shape& s = layout.shape();
  m::Activations acts(s, kB, kT, pool.size());
  std::vector<float> mem(acts.floats(), 0.f);
  std::vector<int> tokens = Tokens(s);
  acts.Bind(mem.data(), tokens.data());
  acts.unpad = unpad;
  acts.dropout.on = true;
  acts.dropout.seed = 99;
  acts.dropout.row0 = 3;  // as a second group's rows would be
  std::vector<float> lora_acts(lora ? lora->ActFloats(kB, kT) : 0);
  m::LoraPass lp{lora, lora_params ? lora_params->data() : nullptr, lora_acts.data()};
  std::unique_ptr<test::Bf16Buffers> b16;
  if (bf16) b16 = std::make_unique<test::Bf16Buffers>(pool, layout, params, kB, kT);
  const m::Bf16Operands* ops = b16 ? &b16->ops : nullptr;
  PassResult r;
  const m::LoraPass* lpp = lora ? &lp : nullptr;
  r.loss = m::Forward(pool, layout, params.data(), acts, kB, kT, true, ops, nullptr, lpp);
  r.grads.assign(lora ? lora->layout().total() : layout.total(), 0.f);
  m::Backward(
      pool, layout, params.data(), r.grads.data(), acts, kB, kT, 1.f / kB, [](std::size_t) {},
      false, ops, lpp);
  const m::Activations::Packed* packed = acts.Unpad(kB, kT);
  r.rows =
      packed ? static_cast<std::size_t>(packed->row_start[kB]) : static_cast<std::size_t>(kB) * kT;
  return r;
}

double RelDiff(const std::vector<float>& got, const std::vector<float>& want) {
  double d = 0, n = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    d += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    n += double(want[i]) * want[i];
  }
  return std::sqrt(d / n);
}

struct Case {
  const char* name;
  m::Arch arch;
  bool bf16, lora;
};

class UnpaddedTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override { kernels::InitBlas(); }
  WorkerPool pool_{std::vector<int>(2, 0), nullptr, "unpad"};
};

TEST_P(UnpaddedTest, ClassifierPassEqualsThePaddedPass) {
  const Case& c = GetParam();
  if (c.bf16 && !kernels::DetectBf16().avx512_bf16)
    GTEST_SKIP() << kernels::DetectBf16().Describe();
  const m::Shape s = Classifier(c.arch);
  ASSERT_EQ(s.Problem(), "");
  const m::ParamLayout layout(s);
  std::vector<float> params(layout.total());
  m::RandomInit(pool_, layout, 5, params.data());
  std::vector<float> lora_params;
  std::unique_ptr<m::Lora> lora =
      c.lora ? test::LiveLora(pool_, layout, params, &lora_params) : nullptr;
  const std::vector<float>* lp = c.lora ? &lora_params : nullptr;
  const PassResult packed = Pass(pool_, layout, params, lora.get(), lp, true, c.bf16);
  const PassResult padded = Pass(pool_, layout, params, lora.get(), lp, false, c.bf16);
  int real = 0;
  for (int L : kLengths) real += L;
  EXPECT_EQ(packed.rows, static_cast<std::size_t>(real)) << "the packed pass did not pack";
  EXPECT_EQ(padded.rows, static_cast<std::size_t>(kB) * kT);
  const double dloss = std::fabs(packed.loss - padded.loss) / std::fabs(padded.loss);
  const double dgrad = RelDiff(packed.grads, padded.grads);
  std::printf("[measured] %s: loss %.9g vs %.9g (rel %.2e), gradients rel %.2e\n", c.name,
              packed.loss, padded.loss, dloss, dgrad);
  const double tol = c.bf16 ? 1e-5 : 1e-6;
  EXPECT_LE(dloss, tol);
  EXPECT_LE(dgrad, tol);
  // The gradients are not all zero (a pass that computed nothing would agree with itself).
  EXPECT_GT(RelDiff(std::vector<float>(padded.grads.size(), 0.f), padded.grads), 0.5);
}

INSTANTIATE_TEST_SUITE_P(
    Encoders, UnpaddedTest,
    ::testing::Values(Case{"Bert", m::Arch::kBert, false, false},
                      Case{"DistilBert", m::Arch::kDistilBert, false, false},
                      Case{"BertBf16", m::Arch::kBert, true, false},
                      Case{"DistilBertBf16", m::Arch::kDistilBert, true, false},
                      Case{"BertLora", m::Arch::kBert, false, true},
                      Case{"DistilBertLoraBf16", m::Arch::kDistilBert, true, true}),
    [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

}  // namespace
}  // namespace cputrain
