// model/lora.h: PEFT's target_modules and modules_to_save resolved against each family's tables —
// which sites (base tensor, rows) a name adapts, the trainable layout, and the refusals.
#include <gtest/gtest.h>

#include <string>

#include "common/error.h"
#include "family_shapes.h"
#include "model/lora.h"
#include "model/params.h"
#include "model/shape.h"

namespace cputrain::model {
namespace {

Shape Llama(bool tied) {
  Shape s{64, 300, 384, 2, 4, 64};
  s.arch = Arch::kLlama;
  s.NKV = 2;
  s.F = 160;
  s.tied = tied;
  s.attn_bias = false;
  s.mlp_bias = false;
  return s;
}

Shape Gpt2() { return Shape{64, 300, 384, 2, 4, 64}; }

Shape Bert() {
  Shape s{64, 300, 384, 2, 4, 64};
  s.arch = Arch::kBert;
  s.types = 2;
  s.head = Head::kSpan;
  s.norm_eps = 1e-12f;
  return s;
}

LoraConfig Cfg(std::vector<std::string> targets, int r = 4) {
  LoraConfig c;
  c.r = r;
  c.alpha = 8;
  c.target_modules = std::move(targets);
  return c;
}

std::string Error(const ParamLayout& base, const LoraConfig& cfg) {
  try {
    Lora lora(base, cfg);
  } catch (const InputError& e) {
    return std::string(e.what()) + " | " + e.hint();
  }
  return "";
}

TEST(LoraTargets, LlamaSitesAreTheRowsOfTheFusedProducts) {
  const ParamLayout base(Llama(true));
  const Lora lora(
      base, Cfg({"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}));
  ASSERT_EQ(lora.sites().size(), 7u);
  // hs = 16: q 64 rows, k and v 32 each (2 KV heads); gate and up F = 160 rows each.
  const auto& qkv = lora.SitesOf(kQkvw);
  ASSERT_EQ(qkv.size(), 3u);
  EXPECT_EQ(qkv[0]->row0, 0);
  EXPECT_EQ(qkv[0]->rows, 64);
  EXPECT_EQ(qkv[1]->row0, 64);
  EXPECT_EQ(qkv[1]->rows, 32);
  EXPECT_EQ(qkv[2]->row0, 96);
  EXPECT_EQ(qkv[2]->rows, 32);
  EXPECT_EQ(qkv[0]->module, "model.layers.{}.self_attn.q_proj");
  const auto& fc = lora.SitesOf(kFcw);
  ASSERT_EQ(fc.size(), 2u);
  EXPECT_EQ(fc[1]->row0, 160);
  EXPECT_EQ(fc[1]->rows, 160);
  EXPECT_EQ(lora.SitesOf(kFcprojw)[0]->in, 160);
  // Per layer: A (r, in) and B (rows, r) of each site.
  const std::size_t per_layer =
      4 * (64 + 64) + 4 * (64 + 32) * 2 + 4 * (64 + 64) + 2 * 4 * (64 + 160) + 4 * (160 + 64);
  EXPECT_EQ(lora.layout().total(), 2 * per_layer);
  EXPECT_EQ(lora.TargetNames(),
            (std::vector<std::string>{"down_proj", "gate_proj", "k_proj", "o_proj", "q_proj",
                                      "up_proj", "v_proj"}));
  EXPECT_TRUE(lora.saved().empty());
}

TEST(LoraTargets, FamilyDefaultsArePeftsAndAllLinearIsEveryBlockProduct) {
  EXPECT_EQ(Lora(ParamLayout(Llama(true)), Cfg({})).TargetNames(),
            (std::vector<std::string>{"q_proj", "v_proj"}));
  EXPECT_EQ(Lora(ParamLayout(Gpt2()), Cfg({})).TargetNames(), (std::vector<std::string>{"c_attn"}));
  EXPECT_EQ(Lora(ParamLayout(Gpt2()), Cfg({"all-linear"})).sites().size(), 4u);
  // GPT-2's c_proj is both attn.c_proj and mlp.c_proj, as PEFT matches it.
  const Lora g(ParamLayout(Gpt2()), Cfg({"c_proj"}));
  ASSERT_EQ(g.sites().size(), 2u);
  EXPECT_EQ(g.sites()[0].module, "transformer.h.{}.attn.c_proj");
  EXPECT_EQ(g.sites()[1].module, "transformer.h.{}.mlp.c_proj");
}

TEST(LoraTargets, BertQaTrainsItsHeadFullyAsPeftsQuestionAnsTask) {
  const ParamLayout base(Bert());
  const Lora lora(base, Cfg({"query", "value", "dense"}));
  EXPECT_EQ(lora.sites().size(), 5u);  // query, value, attention.output.dense, intermediate, output
  EXPECT_EQ(lora.SitesOf(kQkvw)[0]->module, "bert.encoder.layer.{}.attention.self.query");
  ASSERT_EQ(lora.saved().size(), 2u);
  EXPECT_EQ(lora.saved()[0].hf_name, "qa_outputs.weight");
  EXPECT_TRUE(lora.Saves(kHeadw));
  EXPECT_TRUE(lora.Saves(kHeadb));
  EXPECT_EQ(lora.SavedNames(), std::vector<std::string>{"qa_outputs"});
  // The head comes after the blocks in the trainable layout, as in the model's.
  EXPECT_EQ(lora.layout().offset(kHeadw), lora.layout().output_begin());
}

TEST(LoraTargets, ModulesToSaveCopyFromTheBaseAndMergeAddsScaledBA) {
  WorkerPool pool(std::vector<int>(1, 0), nullptr, "lora");
  const ParamLayout base(Llama(false));
  LoraConfig cfg = Cfg({"q_proj"});
  cfg.modules_to_save = {"lm_head"};
  cfg.init = LoraConfig::Init::kRandom;
  const Lora lora(base, cfg);
  std::vector<float> w(base.total()), p(lora.layout().total());
  RandomInit(pool, base, 3, w.data());
  LoraInit(pool, lora, 5, w.data(), p.data());
  const std::size_t head = base.info(kLmHead).numel;
  EXPECT_TRUE(std::equal(w.begin() + base.offset(kLmHead), w.begin() + base.offset(kLmHead) + head,
                         p.begin() + lora.layout().offset(kLmHead)));
  // A's init bound: 1/sqrt(in).
  const float* a = p.data() + lora.layout().offset(lora.sites()[0].a, 1);
  for (int i = 0; i < 4 * 64; ++i) EXPECT_LE(std::abs(a[i]), 1.0f / 8.0f);
  std::vector<float> merged = w;
  LoraMerge(pool, lora, p.data(), merged.data());
  // Element (i, j) of layer 1's q rows: W + (alpha/r) sum_k B[i,k] A[k,j].
  const float* b = p.data() + lora.layout().offset(lora.sites()[0].b, 1);
  const std::size_t q0 = base.offset(kQkvw, 1);
  for (int i : {0, 17, 63}) {
    for (int j : {0, 5, 63}) {
      double d = 0;
      for (int k = 0; k < 4; ++k) d += static_cast<double>(b[i * 4 + k]) * a[k * 64 + j];
      EXPECT_NEAR(merged[q0 + i * 64 + j], w[q0 + i * 64 + j] + 2.0 * d, 1e-6);
    }
  }
  // k rows untouched.
  EXPECT_EQ(merged[q0 + 64 * 64 + 3], w[q0 + 64 * 64 + 3]);
}

TEST(LoraTargets, RefusalsNameTheProblemAndTheFix) {
  const ParamLayout llama(Llama(true));
  EXPECT_NE(Error(llama, Cfg({"q_prj"})).find("'q_prj' is not in this llama model"),
            std::string::npos);
  EXPECT_NE(Error(llama, Cfg({"q_prj"})).find("q_proj"), std::string::npos);
  EXPECT_NE(Error(llama, Cfg({"embed_tokens"})).find("not a linear layer of the blocks"),
            std::string::npos);
  EXPECT_NE(Error(llama, Cfg({"layers.1.self_attn.q_proj"})).find("of its 2 layers only"),
            std::string::npos);
  EXPECT_NE(Error(llama, Cfg({"q_proj"}, 0)).find("rank"), std::string::npos);
  LoraConfig tied = Cfg({"q_proj"});
  tied.modules_to_save = {"lm_head"};
  EXPECT_NE(Error(llama, tied).find("tied"), std::string::npos);
  LoraConfig both = Cfg({"o_proj"});
  both.modules_to_save = {"o_proj"};
  EXPECT_NE(Error(llama, both).find("both a LoRA target and a module to save"), std::string::npos);
  LoraConfig fused = Cfg({"o_proj"});
  fused.modules_to_save = {"q_proj"};
  EXPECT_NE(Error(llama, fused).find("part of a fused tensor"), std::string::npos);
}

// Without target_modules: PEFT's default for the model type (peft 0.21.2's
// TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING: q_proj and v_proj for qwen2, qwen3, mistral
// and gemma3_text); PEFT has none for phi3, and ours adapts its fused qkv_proj. A head size apart
// from C/NH (Qwen3's 6 over C/NH = 4, Gemma 3's 8) sizes q's rows, and o_proj's input.
TEST(LoraTargets, TheNewFamiliesDefaultsAndHeadSizes) {
  for (const auto& [shape, names] : std::vector<std::pair<Shape, std::vector<std::string>>>{
           {test::SmallQwen2(), {"q_proj", "v_proj"}},
           {test::SmallQwen3(), {"q_proj", "v_proj"}},
           {test::SmallMistral(), {"q_proj", "v_proj"}},
           {test::SmallGemma3(), {"q_proj", "v_proj"}},
           {test::SmallPhi3(), {"qkv_proj"}}}) {
    const ParamLayout base(shape);
    const Lora lora(base, Cfg({}));
    EXPECT_EQ(lora.TargetNames(), names) << ArchName(shape.arch);
  }
  const ParamLayout qwen3(test::SmallQwen3());
  const Lora q(qwen3, Cfg({"q_proj", "o_proj"}));
  ASSERT_EQ(q.sites().size(), 2u);
  EXPECT_EQ(q.sites()[0].rows, 4 * 6);  // q: NH * head size
  EXPECT_EQ(q.sites()[1].in, 4 * 6);    // o_proj reads attention's width
  EXPECT_EQ(q.sites()[1].rows, 16);
  const ParamLayout phi3(test::SmallPhi3());
  const Lora p(phi3, Cfg({"qkv_proj", "gate_up_proj"}));
  ASSERT_EQ(p.sites().size(), 2u);
  EXPECT_EQ(p.sites()[0].rows, (4 + 2 * 2) * 4);  // the whole fused q|k|v
  EXPECT_EQ(p.sites()[1].rows, 2 * 24);           // gate|up
  EXPECT_NE(Error(phi3, Cfg({"q_proj"})).find("'q_proj' is not in this phi3 model"),
            std::string::npos);
}

}  // namespace
}  // namespace cputrain::model
