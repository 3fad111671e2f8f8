// The decoder families Qwen2, Qwen3, Mistral, Gemma 3 and Phi-3 on the shared model code, each
// with its quirks on (tests/family_shapes.h): every gradient of the whole model against finite
// differences of its loss (so the post-norms, q/k norms, (1 + w) norms, GeGLU, embedding scale,
// windows, local RoPE and pad rows compose), bf16 near fp32, pool sizes, the KV-cache decoder
// against the full forward through windows shorter than T, the family checkpoint and Hugging
// Face round trips, config.json's keys and refusals, and the presets' published parameter
// counts. Parity with transformers is tests/reference/family_parity.py.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/files.h"
#include "family_shapes.h"
#include "kernels/bf16.h"
#include "kernels/kernels.h"
#include "model/checkpoint.h"
#include "model/decoder.h"
#include "model/family.h"
#include "model/hf.h"
#include "model/presets.h"
#include "model/transformer.h"
#include "runtime/worker_pool.h"
#include "test_util.h"

namespace cputrain::model {
namespace {

using nlohmann::json;
using test::TempDir;

struct Case {
  const char* name;
  Shape shape;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::vector<Case> Cases() {
  return {{"Qwen2", test::SmallQwen2()},
          {"Qwen3", test::SmallQwen3()},
          {"Mistral", test::SmallMistral()},
          {"Gemma3", test::SmallGemma3()},
          {"Phi3", test::SmallPhi3()}};
}

constexpr int kB = 2, kT = 8;

// Random weights, the norms' weights and the biases moved off their init so that one read as
// another shows.
std::vector<float> Weights(const ParamLayout& layout, uint64_t seed) {
  WorkerPool pool(std::vector<int>(1, 0), nullptr, "init");
  std::vector<float> p(layout.total());
  RandomInit(pool, layout, seed, p.data());
  for (const TensorInfo& info : layout.tensors()) {
    if (info.init != Init::kOnes && info.init != Init::kZeros) continue;
    for (int l = 0; l < (info.per_layer ? layout.shape().L : 1); ++l) {
      float* w = p.data() + layout.offset(info.t, l);
      for (std::size_t i = 0; i < info.numel; ++i) w[i] += 0.2f * std::sin(1.0f + i + 7.0f * l);
    }
  }
  // Larger projections than GPT-2's 0.02, so that attention is not uniform and the windows,
  // scales and norms move the loss.
  for (Tensor t : {kQkvw, kAttprojw, kFcw, kFcprojw, kWte, kLmHead}) {
    if (!layout.has(t)) continue;
    const TensorInfo& info = layout.info(t);
    for (int l = 0; l < (info.per_layer ? layout.shape().L : 1); ++l) {
      float* w = p.data() + layout.offset(t, l);
      for (std::size_t i = 0; i < info.numel; ++i) w[i] *= 10.f;
    }
  }
  return p;
}

// Rows of tokens: inputs and next tokens, the pad token among the inputs.
std::vector<int> Tokens(const Shape& s) {
  std::vector<int> tok(Activations::TokenInts(s, kB, kT));
  const std::size_t N = static_cast<std::size_t>(kB) * kT;
  for (std::size_t i = 0; i < N; ++i) {
    tok[i] = static_cast<int>((i * 37 + 3) % s.V);
    tok[N + i] = static_cast<int>((i * 13 + 5) % s.V);
  }
  if (s.pad_token >= 0) tok[2] = tok[kT + 5] = s.pad_token;
  return tok;
}

// The loss (sum over the positions) and, with grads, every gradient (dloss 1), on activation
// memory kept between runs.
class Pass {
 public:
  Pass(const ParamLayout& layout, WorkerPool& pool, bool bf16 = false)
      : layout_(layout),
        pool_(pool),
        bf16_(bf16),
        acts_(layout.shape(), kB, kT, pool.size()),
        mem_(acts_.floats(), 0.f),
        tokens_(Tokens(layout.shape())) {
    acts_.Bind(mem_.data(), tokens_.data());
    const Shape& s = layout.shape();
    if (bf16) {
      wb_.resize(layout.total());
      in_.resize(Bf16Operands::InElems(s, kB, kT));
      dout_.resize(Bf16Operands::DoutElems(s, kB, kT));
      attn_.resize(Bf16Operands::AttnElems(pool.size(), kT));
    }
  }
  double Run(const std::vector<float>& p, std::vector<float>* grads) {
    Bf16Operands ops;
    if (bf16_) {
      kernels::ConvertToBf16(pool_, wb_.data(), p.data(), p.size());
      ops = {wb_.data(), in_.data(), dout_.data(), attn_.data()};
    }
    const Bf16Operands* b = bf16_ ? &ops : nullptr;
    const double loss = Forward(pool_, layout_, p.data(), acts_, kB, kT, true, b);
    if (grads) {
      grads->assign(layout_.total(), 0.f);
      Backward(
          pool_, layout_, p.data(), grads->data(), acts_, kB, kT, 1.f, [](std::size_t) {}, false,
          b);
    }
    return loss;
  }

 private:
  const ParamLayout& layout_;
  WorkerPool& pool_;
  bool bf16_;
  Activations acts_;
  std::vector<float> mem_;
  std::vector<int> tokens_;
  std::vector<uint16_t> wb_, in_, dout_, attn_;
};

// Relative 2-norm difference of two gradient buffers.
double RelDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, n = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    d += std::pow(double(a[i]) - b[i], 2);
    n += std::pow(double(b[i]), 2);
  }
  return std::sqrt(d / n);
}

class FamilyTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override { kernels::InitBlas(); }
  WorkerPool pool_{std::vector<int>(2, 0), nullptr, "fam"};
};

TEST_P(FamilyTest, ShapeIsValidAndRoundTripsThroughJson) {
  const Shape& s = GetParam().shape;
  ASSERT_EQ(s.Problem(), "");
  const ParamLayout layout(s);
  EXPECT_EQ(layout.total(), s.ParamCount());
  EXPECT_EQ(ShapeFromJson(ShapeToJson(s)), s);
  EXPECT_EQ(ArchFromName(ArchName(s.arch)), s.arch);
}

// Every tensor's gradient (a few elements each, all of the small ones) against the central
// difference of the loss: the whole block, composed.
TEST_P(FamilyTest, EveryGradientMatchesFiniteDifferences) {
  const ParamLayout layout(GetParam().shape);
  std::vector<float> p = Weights(layout, 5), g;
  WorkerPool one(std::vector<int>(1, 0), nullptr, "fd");  // hundreds of tiny passes
  Pass pass(layout, one);
  pass.Run(p, &g);
  const Shape& s = layout.shape();
  // The pad token's embedding row: nn.Embedding(padding_idx) gives its lookups no gradient, which
  // is not the loss's derivative (the lookups still read the row): checked apart, below.
  const std::size_t pad_begin =
      s.pad_token >= 0 ? layout.offset(kWte) + std::size_t(s.pad_token) * s.C : 0;
  const std::size_t pad_end = s.pad_token >= 0 ? pad_begin + s.C : 0;
  const float h = 1e-2f;
  int checked = 0;
  for (const TensorInfo& info : layout.tensors()) {
    for (int l = 0; l < (info.per_layer ? layout.shape().L : 1); ++l) {
      const std::size_t at = layout.offset(info.t, l);
      const std::size_t real =
          info.real_rows ? info.real_rows * (info.numel / info.shape[0]) : info.numel;
      for (std::size_t k = 0; k < 8; ++k) {
        const std::size_t i = at + (k * 7919 + 13 * l) % real;
        if (i >= pad_begin && i < pad_end) continue;
        const float saved = p[i];
        p[i] = saved + h;
        const double up = pass.Run(p, nullptr);
        p[i] = saved - h;
        const double down = pass.Run(p, nullptr);
        p[i] = saved;
        const double num = (up - down) / (2.0 * h);
        EXPECT_NEAR(g[i], num, 3e-2 * std::fabs(num) + 2e-3)
            << DescribeParam(layout, i) << ": analytic " << g[i] << " numeric " << num;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 150);
  // The pad token's embedding row learns only from the head (tied) or nothing (untied).
  if (s.pad_token >= 0 && !s.tied) {
    const float* row = g.data() + layout.offset(kWte) + static_cast<std::size_t>(s.pad_token) * s.C;
    for (int c = 0; c < s.C; ++c) ASSERT_EQ(row[c], 0.f) << "pad row, column " << c;
  }
}

// The same pool twice gives the same bits; pools of 1 and 3 workers (other BLAS splits) the same
// loss and gradients to rounding.
TEST_P(FamilyTest, PoolSizes) {
  const ParamLayout layout(GetParam().shape);
  const std::vector<float> p = Weights(layout, 9);
  WorkerPool one(std::vector<int>(1, 0), nullptr, "p1"),
      three(std::vector<int>(3, 0), nullptr, "p3");
  std::vector<float> g1, g3, g3b;
  Pass a(layout, one), b(layout, three), c(layout, three);
  const double l1 = a.Run(p, &g1), l3 = b.Run(p, &g3);
  EXPECT_EQ(c.Run(p, &g3b), l3);
  EXPECT_EQ(g3b, g3);
  EXPECT_NEAR(l1, l3, 1e-6 * std::fabs(l3));
  EXPECT_LT(RelDiff(g1, g3), 1e-6);
}

// bf16 products (train.precision bf16) stay near fp32: the loss within 1%, each tensor's
// gradient within 5% (2-norm of the difference over fp32's).
TEST_P(FamilyTest, Bf16NearFp32) {
  if (!kernels::DetectBf16().avx512_bf16) GTEST_SKIP() << kernels::DetectBf16().Describe();
  const ParamLayout layout(GetParam().shape);
  const std::vector<float> p = Weights(layout, 13);
  std::vector<float> g32, g16;
  Pass fp32(layout, pool_), bf16(layout, pool_, true);
  const double l32 = fp32.Run(p, &g32), l16 = bf16.Run(p, &g16);
  EXPECT_NEAR(l16, l32, 1e-2 * std::fabs(l32));
  for (const TensorInfo& info : layout.tensors()) {
    double diff = 0, norm = 0;
    for (int l = 0; l < (info.per_layer ? layout.shape().L : 1); ++l) {
      const std::size_t at = layout.offset(info.t, l);
      for (std::size_t i = 0; i < info.numel; ++i) {
        diff += std::pow(double(g16[at + i]) - g32[at + i], 2);
        norm += std::pow(double(g32[at + i]), 2);
      }
    }
    EXPECT_LE(std::sqrt(diff), 5e-2 * std::sqrt(norm) + 1e-6) << info.name;
  }
  EXPECT_NE(g16, g32);  // bf16 really ran
}

// Generation's KV cache, windows included (T = maxT = 16, windows of 3): position by position, the
// logits the full forward gives.
TEST_P(FamilyTest, DecoderMatchesForwardAtEveryPosition) {
  const ParamLayout layout(GetParam().shape);
  const Shape& s = layout.shape();
  const std::vector<float> p = Weights(layout, 11);
  const int T = s.maxT;
  Activations acts(s, 1, T, pool_.size());
  std::vector<float> mem(acts.floats(), 0.f);
  std::vector<int> tokens(2 * T);
  acts.Bind(mem.data(), tokens.data());
  for (int t = 0; t < T; ++t) acts.inputs[t] = (t * 37 + 5) % s.V;
  Forward(pool_, layout, p.data(), acts, 1, T, false);
  pool_.Run([&] {
    Decoder dec(pool_, layout, p.data());
    for (int t = 0; t < T; ++t) {
      const float* logits = dec.Feed(acts.inputs[t]);
      for (int v = 0; v < s.V; ++v) {
        const float want = acts.logits[static_cast<std::size_t>(t) * s.Vp + v];
        ASSERT_NEAR(logits[v], want, 1e-4 * (1 + std::fabs(want))) << "position " << t;
      }
    }
  });
}

TEST_P(FamilyTest, CheckpointAndHuggingFaceRoundTrips) {
  const ParamLayout layout(GetParam().shape);
  const std::vector<float> p = Weights(layout, 3);
  TempDir dir;
  const std::string bin = dir.path() + "/model.bin";
  SaveCheckpoint(bin, layout, p.data());
  EXPECT_EQ(ReadCheckpointShape(bin), layout.shape());
  std::vector<float> back(layout.total());
  LoadCheckpoint(bin, layout, back.data());
  EXPECT_EQ(back, p);
  const std::string hf = dir.path() + "/hf";
  ExportHf(hf, layout, p.data());
  EXPECT_EQ(ReadHfShape(hf), layout.shape()) << ReadHfShape(hf).ToString();
  std::vector<float> from_hf(layout.total());
  LoadHf(hf, layout, from_hf.data());
  EXPECT_EQ(from_hf, p);
  const json cfg = json::parse(test::Slurp(hf + "/config.json"));
  const Family& f = FamilyOf(layout.shape().arch);
  EXPECT_EQ(cfg["model_type"], f.hf_model_type);
  EXPECT_EQ(cfg["architectures"][0], f.hf_architecture);
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

// from_hf_config of `cfg` (a family's config.json) with `key` set to `value`: the refusal's
// message, or "" when accepted.
std::string Refusal(Arch arch, json cfg, const std::string& key, const json& value) {
  if (value.is_discarded()) {
    cfg.erase(key);
  } else {
    cfg[key] = value;
  }
  try {
    FamilyOf(arch).from_hf_config(cfg, "c.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

Shape FromHf(Arch arch, const json& cfg) { return FamilyOf(arch).from_hf_config(cfg, "c.json"); }

// config.json as the families' transformers classes read it: defaults where a key is missing,
// the window switches, and what this engine cannot run refused by name.
TEST(FamilyConfig, Qwen2WindowsFollowUseSlidingWindowAndMaxWindowLayers) {
  const Shape s = test::SmallQwen2();
  json cfg = FamilyOf(Arch::kQwen2).to_hf_config(s);
  EXPECT_EQ(cfg["use_sliding_window"], true);
  EXPECT_EQ(cfg["max_window_layers"], 1);
  EXPECT_EQ(cfg["layer_types"], json({"full_attention", "sliding_attention", "sliding_attention"}));
  EXPECT_EQ(FromHf(Arch::kQwen2, cfg), s);
  cfg.erase("layer_types");  // an older save: max_window_layers decides
  cfg["max_window_layers"] = 2;
  EXPECT_EQ(FromHf(Arch::kQwen2, cfg).window_from, 2);
  cfg["use_sliding_window"] = false;  // then sliding_window is ignored, as Qwen2Config does
  EXPECT_EQ(FromHf(Arch::kQwen2, cfg).window, 0);
  cfg = FamilyOf(Arch::kQwen2).to_hf_config(s);
  cfg["layer_types"] = {"sliding_attention", "full_attention", "full_attention"};
  EXPECT_NE(Refusal(Arch::kQwen2, cfg, "max_window_layers", 0).find("not a pattern"),
            std::string::npos);
  EXPECT_NE(Refusal(Arch::kQwen2, cfg, "layer_types", {"sliding_attention"})
                .find("not a list of num_hidden_layers = 3"),
            std::string::npos);
  EXPECT_NE(Refusal(Arch::kQwen2, cfg, "hidden_act", "gelu").find("hidden_act"), std::string::npos);
  EXPECT_NE(Refusal(Arch::kQwen2, cfg, "rope_scaling", {{"rope_type", "yarn"}, {"factor", 4}})
                .find("rope_scaling type 'yarn'"),
            std::string::npos);
  EXPECT_NE(Refusal(Arch::kQwen2, cfg, "pad_token_id", 60).find("pad_token_id is 60"),
            std::string::npos);
  EXPECT_NE(Refusal(Arch::kQwen2, cfg, "attention_dropout", 0.1).find("attention_dropout"),
            std::string::npos);
}

TEST(FamilyConfig, Qwen3HeadDimDefaultsTo128) {
  const Shape s = test::SmallQwen3();
  json cfg = FamilyOf(Arch::kQwen3).to_hf_config(s);
  EXPECT_EQ(cfg["head_dim"], 6);
  EXPECT_EQ(FromHf(Arch::kQwen3, cfg), s);
  cfg.erase("head_dim");  // Qwen3Config's default, not hidden / heads
  EXPECT_EQ(FromHf(Arch::kQwen3, cfg).head_size(), 128);
}

TEST(FamilyConfig, MistralSlidingWindowDefaultsTo4096AndNullTurnsItOff) {
  const Shape s = test::SmallMistral();
  json cfg = FamilyOf(Arch::kMistral).to_hf_config(s);
  EXPECT_EQ(FromHf(Arch::kMistral, cfg), s);
  cfg.erase("sliding_window");
  EXPECT_EQ(FromHf(Arch::kMistral, cfg).window, 4096);
  cfg["sliding_window"] = nullptr;
  EXPECT_EQ(FromHf(Arch::kMistral, cfg).window, 0);
  cfg["head_dim"] = nullptr;  // MistralConfig's None: hidden / heads
  EXPECT_EQ(FromHf(Arch::kMistral, cfg).head_size(), 4);
}

TEST(FamilyConfig, Gemma3LocalAndGlobalLayersAndItsRefusals) {
  const Shape s = test::SmallGemma3();
  json cfg = FamilyOf(Arch::kGemma3).to_hf_config(s);
  EXPECT_EQ(cfg["model_type"], "gemma3_text");
  EXPECT_EQ(cfg["layer_types"], json({"sliding_attention", "full_attention", "sliding_attention"}));
  EXPECT_EQ(cfg["query_pre_attn_scalar"], 5.0);
  EXPECT_EQ(cfg["rope_scaling"], json({{"factor", 2.0}, {"rope_type", "linear"}}));
  EXPECT_EQ(FromHf(Arch::kGemma3, cfg), s);
  // Without layer_types, sliding_window_pattern decides (6 by default: layer 5 is global).
  json old = cfg;
  old.erase("layer_types");
  old["num_hidden_layers"] = 7;
  const Shape seven = FromHf(Arch::kGemma3, old);
  EXPECT_EQ(seven.global_every, 6);
  for (int l = 0; l < 7; ++l) EXPECT_EQ(seven.windowed(l), l != 5) << l;
  old["sliding_window_pattern"] = 2;
  EXPECT_EQ(FromHf(Arch::kGemma3, old).global_every, 2);
  json no_pad = cfg;
  no_pad.erase("pad_token_id");  // Gemma3TextConfig's pad token 0
  EXPECT_EQ(FromHf(Arch::kGemma3, no_pad).pad_token, 0);
  for (const auto& [key, value, needle] : std::vector<std::tuple<std::string, json, std::string>>{
           {"final_logit_softcapping", 30.0, "final_logit_softcapping"},
           {"attn_logit_softcapping", 50.0, "attn_logit_softcapping"},
           {"hidden_activation", "gelu", "hidden_activation"},
           {"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8}}, "rope_scaling type 'llama3'"},
           {"use_bidirectional_attention", true, "use_bidirectional_attention"}}) {
    EXPECT_NE(Refusal(Arch::kGemma3, cfg, key, value).find(needle), std::string::npos) << key;
  }
  // The image-text model is refused by name where the directory is read.
  TempDir dir;
  json mm = cfg;
  mm["model_type"] = "gemma3";
  WriteFileAtomic(dir.path() + "/config.json", mm.dump());
  WriteFileAtomic(dir.path() + "/model.safetensors", "");
  try {
    ReadHfShape(dir.path());
    ADD_FAILURE() << "model_type gemma3 accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("image-text Gemma 3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.hint()).find("Gemma3ForCausalLM"), std::string::npos) << e.hint();
  }
}

TEST(FamilyConfig, Phi3RefusesLongropeAndPartialRotary) {
  const Shape s = test::SmallPhi3();
  json cfg = FamilyOf(Arch::kPhi3).to_hf_config(s);
  EXPECT_EQ(FromHf(Arch::kPhi3, cfg), s);
  json longrope = {{"type", "longrope"}, {"short_factor", {1.0}}, {"long_factor", {1.0}}};
  EXPECT_NE(Refusal(Arch::kPhi3, cfg, "rope_scaling", longrope).find("'longrope'"),
            std::string::npos);
  EXPECT_NE(Refusal(Arch::kPhi3, cfg, "partial_rotary_factor", 0.75).find("partial_rotary_factor"),
            std::string::npos);
  EXPECT_NE(Refusal(Arch::kPhi3, cfg, "resid_pdrop", 0.1).find("resid_pdrop"), std::string::npos);
  // Phi3Config's pad token 32000 when config.json names none (a vocabulary holding it).
  cfg.erase("pad_token_id");
  cfg["vocab_size"] = 32064;
  EXPECT_EQ(FromHf(Arch::kPhi3, cfg).pad_token, 32000);
}

// Issue 43, item 10: partial_rotary_factor 0.5 was accepted and ignored by every family but
// Phi-3 (transformers' Llama, Qwen2, Qwen3, Mistral and Gemma 3 fail on it; this engine rotates
// whole heads): each refuses it, naming config.json and the key; 1 and null are the default.
TEST(FamilyConfig, PartialRotaryFactorRefusedByEveryRopeFamily) {
  Shape llama = test::SmallQwen2();
  llama.arch = Arch::kLlama;
  llama.attn_bias = false;
  for (const Shape& s : {llama, test::SmallQwen2(), test::SmallQwen3(), test::SmallMistral(),
                         test::SmallGemma3(), test::SmallPhi3()}) {
    const Family& f = FamilyOf(s.arch);
    const json cfg = f.to_hf_config(s);
    const std::string refused = Refusal(s.arch, cfg, "partial_rotary_factor", 0.5);
    EXPECT_NE(refused.find("'c.json': partial_rotary_factor is 0.5"), std::string::npos)
        << f.name << ": " << refused;
    EXPECT_EQ(Refusal(s.arch, cfg, "partial_rotary_factor", 1.0), "") << f.name;
    EXPECT_EQ(Refusal(s.arch, cfg, "partial_rotary_factor", nullptr), "") << f.name;
  }
}

// Issue 43, item 10: Gemma 3's sliding_window_pattern -2, 0 and 2.5 silently became 6, and of
// sliding_window_pattern and _sliding_window_pattern the second won. transformers 4.55.4's
// Gemma3TextConfig (without layer_types) reads sliding_window_pattern only (6 if absent): 0,
// null and "3" raise there, -2, 2.5 and true give layers no Gemma has (Python's %); 2.0 is 2, a
// pattern past the last layer windows them all; _sliding_window_pattern is ignored (checked in
// the peers' environment). Here: the same layers, or a refusal naming the key.
TEST(FamilyConfig, Gemma3SlidingWindowPatternAsTransformersReadsIt) {
  json old = FamilyOf(Arch::kGemma3).to_hf_config(test::SmallGemma3());
  old.erase("layer_types");
  old["num_hidden_layers"] = 7;
  for (const json& bad : {json(-2), json(0), json(2.5), json(true), json("3"), json(nullptr)}) {
    EXPECT_NE(Refusal(Arch::kGemma3, old, "sliding_window_pattern", bad)
                  .find("'c.json': sliding_window_pattern is " + bad.dump() + ", not a positive"),
              std::string::npos)
        << bad;
  }
  json c = old;
  c["sliding_window_pattern"] = 2.0;
  EXPECT_EQ(FromHf(Arch::kGemma3, c).global_every, 2);
  c["sliding_window_pattern"] = 100;  // past the last layer: every layer windowed
  const Shape all = FromHf(Arch::kGemma3, c);
  for (int l = 0; l < 7; ++l) EXPECT_TRUE(all.windowed(l)) << l;
  c["_sliding_window_pattern"] = 100;  // agreeing: fine
  EXPECT_EQ(FromHf(Arch::kGemma3, c), all);
  c["_sliding_window_pattern"] = 3;  // transformers would run 100 and ignore it
  EXPECT_NE(Refusal(Arch::kGemma3, c, "sliding_window_pattern", 100)
                .find("_sliding_window_pattern is 3, but without layer_types"),
            std::string::npos);
  EXPECT_NE(Refusal(Arch::kGemma3, old, "_sliding_window_pattern", 3).find("(absent: 6)"),
            std::string::npos);
  EXPECT_EQ(Refusal(Arch::kGemma3, old, "_sliding_window_pattern", 6), "");
  // With layer_types (what transformers saves), the pattern keys are not read, there or here.
  json saved = FamilyOf(Arch::kGemma3).to_hf_config(test::SmallGemma3());
  saved["sliding_window_pattern"] = 0;
  saved["_sliding_window_pattern"] = 2;
  EXPECT_EQ(FromHf(Arch::kGemma3, saved), test::SmallGemma3());
}

// The presets carry the published shapes: transformers 4.55.4 counts 494,032,768 parameters in
// Qwen2ForCausalLM(Qwen2.5-0.5B's config) (model card: 0.49B, 0.36B without the embedding),
// 596,049,920 in Qwen3-0.6B's (0.6B; 0.44B), 268,098,176 in Gemma3ForCausalLM(gemma-3-270m's)
// (270M: 170M embedding, 100M blocks); each tied, so our count is theirs plus the padding rows.
TEST(FamilyPresets, HaveThePublishedParameterCounts) {
  auto real = [](const char* name) {
    const Preset* p = FindPreset(name);
    EXPECT_NE(p, nullptr) << name;
    if (!p) return std::uint64_t{0};
    EXPECT_EQ(p->shape.Problem(), "") << name;
    EXPECT_TRUE(p->shape.tied) << name;
    return p->shape.ParamCount() -
           static_cast<std::uint64_t>(p->shape.Vp - p->shape.V) * p->shape.C;
  };
  EXPECT_EQ(real("qwen2.5-0.5b"), 494'032'768u);
  EXPECT_EQ(real("qwen3-0.6b"), 596'049'920u);
  EXPECT_EQ(real("gemma3-270m"), 268'098'176u);
  // The 7-8B presets are untied, and their vocabularies need no padding: transformers' counts.
  for (const auto& [name, count] :
       std::vector<std::pair<const char*, std::uint64_t>>{{"llama3-8b-lora", 8'030'261'248u},
                                                          {"qwen2.5-7b-lora", 7'615'616'512u},
                                                          {"mistral-7b-lora", 7'248'023'552u}}) {
    const Preset* p = FindPreset(name);
    ASSERT_NE(p, nullptr) << name;
    EXPECT_EQ(p->shape.Problem(), "") << name;
    EXPECT_FALSE(p->shape.tied) << name;
    EXPECT_EQ(p->shape.Vp, p->shape.V) << name;
    EXPECT_EQ(p->shape.ParamCount(), count) << name;
  }
  const Shape& g = FindPreset("gemma3-270m")->shape;
  EXPECT_EQ(g.head_size(), 256);
  for (int l = 0; l < g.L; ++l) EXPECT_EQ(g.windowed(l), (l + 1) % 6 != 0) << l;
}

}  // namespace
}  // namespace cputrain::model
