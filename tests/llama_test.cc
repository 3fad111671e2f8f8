// The Llama family on the shared model code (src/model/): its table and layout, KV-cache
// decoding against the full forward, the family checkpoint format and sharded Hugging Face
// directories. Parity with transformers (logits, every gradient, 10 AdamW steps, export) is
// tests/reference/llama_parity.py; resume and placements are in resume_test.cc / train_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/files.h"
#include "kernels/kernels.h"
#include "model/checkpoint.h"
#include "model/decoder.h"
#include "model/family.h"
#include "model/hf.h"
#include "model/presets.h"
#include "model/safetensors.h"
#include "model/transformer.h"
#include "runtime/worker_pool.h"
#include "test_util.h"

namespace cputrain::model {
namespace {

using test::Slurp;
using test::TempDir;

// 3 layers, C=48, 4 heads over 2 KV heads (head size 12), F=80, V=300 (padded 384), untied,
// llama3 rope scaling that matters within maxT = 32.
Shape SmallLlama(bool tied = false) {
  Shape s(32, 300, Shape::PadVocab(300), 3, 4, 48);
  s.arch = Arch::kLlama;
  s.NKV = 2;
  s.F = 80;
  s.norm_eps = 1e-6f;
  s.rope_theta = 5000.f;
  s.rope_scaling.kind = RopeScaling::kLlama3;
  s.rope_scaling.factor = 8;
  s.rope_scaling.original_max_position = 8;
  s.tied = tied;
  s.attn_bias = s.mlp_bias = false;
  return s;
}

// Random weights, the norms' weights moved off 1 so that a norm read as another shows.
std::vector<float> RandomWeights(const ParamLayout& layout, uint64_t seed) {
  WorkerPool pool(std::vector<int>(1, 0), nullptr, "init");
  std::vector<float> p(layout.total());
  RandomInit(pool, layout, seed, p.data());
  for (const TensorInfo& info : layout.tensors()) {
    if (info.init != Init::kOnes) continue;
    for (int l = 0; l < (info.per_layer ? layout.shape().L : 1); ++l) {
      float* w = p.data() + layout.offset(info.t, l);
      for (std::size_t i = 0; i < info.numel; ++i) w[i] += 0.1f * std::sin(1.0f + i + 7.0f * l);
    }
  }
  return p;
}

TEST(Llama, LayoutFollowsTheTable) {
  const Shape s = SmallLlama();
  ASSERT_EQ(s.Problem(), "");
  const ParamLayout layout(s);
  EXPECT_FALSE(layout.has(kWpe));
  EXPECT_FALSE(layout.has(kLn1b));
  EXPECT_FALSE(layout.has(kQkvb));
  EXPECT_TRUE(layout.has(kLmHead));
  EXPECT_EQ(layout.head(), kLmHead);
  // q|k|v fused: (4 + 2*2) heads of 12; gate|up fused: 2F rows.
  EXPECT_EQ(layout.info(kQkvw).shape, (std::vector<std::size_t>{96, 48}));
  EXPECT_EQ(layout.info(kFcw).shape, (std::vector<std::size_t>{160, 48}));
  EXPECT_EQ(layout.info(kFcprojw).shape, (std::vector<std::size_t>{48, 80}));
  // Input: the embedding; output: the final norm and the untied head.
  EXPECT_EQ(layout.offset(kWte), 0u);
  EXPECT_EQ(layout.block_begin(0), 384u * 48);
  EXPECT_EQ(layout.offset(kLnfw), layout.output_begin());
  EXPECT_EQ(layout.offset(kLmHead), layout.output_begin() + 48);
  EXPECT_EQ(layout.total(), layout.output_begin() + 48 + 384u * 48);
  EXPECT_EQ(layout.total(), s.ParamCount());
  const std::vector<std::size_t> ready = layout.ReadyPoints();
  EXPECT_EQ(ready, (std::vector<std::size_t>{layout.output_begin(), layout.block_begin(2),
                                             layout.block_begin(1), layout.block_begin(0), 0}));
  // Weight decay on the 2-D tensors only: the norms' weights are not decayed.
  for (const ParamLayout::Segment& seg : layout.segments()) {
    const bool norm = seg.begin == layout.offset(kLnfw) || seg.begin == layout.offset(kLn1w, 1);
    if (norm) {
      EXPECT_FALSE(seg.decay) << seg.begin;
    }
  }
  // The tied model has no head tensor and the head is the embedding.
  const ParamLayout tied(SmallLlama(true));
  EXPECT_FALSE(tied.has(kLmHead));
  EXPECT_EQ(tied.head(), kWte);
  EXPECT_EQ(tied.total() + 384u * 48, layout.total());
}

TEST(Llama, ShapeProblemsNameTheDimension) {
  Shape s = SmallLlama();
  s.NKV = 3;
  EXPECT_EQ(s.Problem(), "NKV (3) does not divide NH (4)");
  s = SmallLlama();
  s.NKV = 8;
  EXPECT_EQ(s.Problem(), "NKV is 8: it must be in [1, 4]");
  s = SmallLlama();
  s.C = 44;  // head size 11: odd
  EXPECT_NE(s.Problem().find("rotary embeddings need it even"), std::string::npos);
  s = SmallLlama();
  s.norm_eps = 0;
  EXPECT_NE(s.Problem().find("norm epsilon"), std::string::npos);
  Shape g(64, 256, 256, 2, 4, 64);
  g.NKV = 2;
  EXPECT_EQ(g.Problem(), "GPT-2 has NKV = NH, F = 4C and a tied head");
}

TEST(Llama, RandomInitLeavesPaddingRowsZero) {
  const ParamLayout layout(SmallLlama());
  const std::vector<float> p = RandomWeights(layout, 7);
  for (Tensor t : {kWte, kLmHead}) {
    const float* w = p.data() + layout.offset(t);
    for (std::size_t i = 300 * 48; i < 384 * 48; ++i) ASSERT_EQ(w[i], 0.f) << int(t);
    EXPECT_NE(w[0], 0.f);
  }
}

// The KV-cache decoder (model::Forward with a KvCache: the rotary embedding at the cache's
// position, grouped-query attention over the cache) gives, one position at a time, the logits
// Forward gives for the whole sequence; also past 1024 positions, where the cache grows
// (KvCache::Reserve moves every layer's rows).
TEST(Llama, DecoderMatchesForwardAtEveryPosition) {
  kernels::InitBlas();
  for (const std::pair<bool, int>& c :
       {std::pair{false, 32}, std::pair{true, 32}, std::pair{false, 1100}}) {
    const bool tied = c.first;  // a plain variable: clang 14 captures no structured binding
    Shape shape = SmallLlama(tied);
    shape.maxT = c.second;
    const ParamLayout layout(shape);
    const Shape& s = layout.shape();
    const std::vector<float> p = RandomWeights(layout, 11);
    const int T = s.maxT;
    WorkerPool pool(std::vector<int>(2, 0), nullptr, "dec");
    Activations acts(s, 1, T, pool.size());
    std::vector<float> mem(acts.floats(), 0.f);
    std::vector<int> tokens(2 * T);
    acts.Bind(mem.data(), tokens.data());
    for (int t = 0; t < T; ++t) acts.inputs[t] = (t * 37 + 5) % s.V;
    Forward(pool, layout, p.data(), acts, 1, T, false);
    pool.Run([&] {
      Decoder dec(pool, layout, p.data());
      for (int t = 0; t < T; ++t) {
        const float* logits = dec.Feed(acts.inputs[t]);
        for (int v = 0; v < s.V; ++v) {
          ASSERT_NEAR(logits[v], acts.logits[static_cast<std::size_t>(t) * s.Vp + v], 1e-4)
              << "tied " << tied << " position " << t << " token " << v;
        }
      }
      EXPECT_EQ(dec.position(), T);
      EXPECT_THROW(dec.Feed(1), InputError);  // every position is used
    });
  }
}

TEST(Llama, FamilyCheckpointRoundTripsAndRefusesADamagedHeader) {
  const ParamLayout layout(SmallLlama());
  const std::vector<float> p = RandomWeights(layout, 3);
  TempDir dir;
  const std::string path = dir.path() + "/model.bin";
  SaveCheckpoint(path, layout, p.data());
  EXPECT_EQ(ReadCheckpointShape(path), layout.shape());
  std::vector<float> back(layout.total());
  LoadCheckpoint(path, layout, back.data());
  EXPECT_EQ(back, p);
  // The header: magic, version, the shape's JSON.
  std::string bytes = Slurp(path);
  int32_t h[3];
  std::memcpy(h, bytes.data(), sizeof h);
  EXPECT_EQ(h[0], kFamilyCheckpointMagic);
  EXPECT_EQ(h[1], kFamilyCheckpointVersion);
  EXPECT_EQ(nlohmann::json::parse(bytes.substr(12, h[2]))["arch"], "llama");
  auto refused = [&](std::string damaged, const std::string& needle) {
    WriteFileAtomic(path, damaged);
    try {
      ReadCheckpointShape(path);
      ADD_FAILURE() << "accepted: " << needle;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  std::string json_len = bytes;
  const int32_t huge = 5000;
  std::memcpy(json_len.data() + 8, &huge, 4);
  refused(json_len, "its header's shape is 5000 bytes long");
  std::string not_json = bytes;
  not_json[12] = '[';
  refused(not_json, "cannot be read");
  std::string bad_arch = bytes;
  const std::size_t at = bad_arch.find("\"llama\"");
  bad_arch.replace(at, 7, "\"mamba\"");
  refused(bad_arch, "unknown model family 'mamba'");
  std::string version = bytes;
  const int32_t v3 = 3;
  std::memcpy(version.data() + 4, &v3, 4);
  refused(version, "version 3 of the model-family format");
  refused(bytes.substr(0, bytes.size() - 4), "bytes but its header");
}

// Issue 32: a header whose rope_theta was edited loaded without a word (no state.bin beside the
// file, no checksum). The format's CRC32C trailer refuses it, and a flipped weight; a version-1
// file (no trailer) still loads.
TEST(Llama, FamilyCheckpointWithAnEditedRopeThetaLoadedWithoutAWord) {
  const ParamLayout layout(SmallLlama());
  const std::vector<float> p = RandomWeights(layout, 4);
  TempDir dir;
  const std::string path = dir.path() + "/model.bin";
  SaveCheckpoint(path, layout, p.data());
  const std::string bytes = Slurp(path);
  std::vector<float> back(layout.total());
  auto load_error = [&](const std::string& file) -> std::string {
    WriteFileAtomic(path, file);
    try {
      LoadCheckpoint(path, ParamLayout(ReadCheckpointShape(path)), back.data());
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  };
  const std::size_t at = bytes.find("\"rope_theta\":");
  ASSERT_NE(at, std::string::npos);
  std::string edited = bytes;
  const std::size_t digit = edited.find_first_of("123456789", at);
  edited[digit] = edited[digit] == '9' ? '8' : static_cast<char>(edited[digit] + 1);
  const std::string e = load_error(edited);
  EXPECT_NE(ReadCheckpointShape(path).rope_theta, layout.shape().rope_theta);  // the edit took
  EXPECT_NE(e.find("is damaged: its CRC32C is"), std::string::npos) << e;
  EXPECT_NE(e.find("its trailer records"), std::string::npos) << e;
  std::string flipped = bytes;
  flipped[1024 + 40] ^= 0x10;
  EXPECT_NE(load_error(flipped).find("is damaged"), std::string::npos);
  // Version 1: the same bytes without the trailer.
  std::string v1 = bytes.substr(0, bytes.size() - 4);
  const int32_t one = kFamilyCheckpointVersionUnchecked;
  std::memcpy(v1.data() + 4, &one, 4);
  EXPECT_EQ(load_error(v1), "");
  EXPECT_EQ(back, p);
}

// A sharded Hugging Face directory (model.safetensors.index.json + shards) loads as the single
// file does; an index naming a path outside the directory is refused.
TEST(Llama, ShardedHfDirectoryLoadsAsOneFile) {
  const ParamLayout layout(SmallLlama());
  const std::vector<float> p = RandomWeights(layout, 5);
  TempDir one, sharded;
  ExportHf(one.path(), layout, p.data());
  const std::vector<HfTensorData> tensors = ToHfTensors(layout, p.data());
  nlohmann::json map = nlohmann::json::object();
  std::vector<SafeTensorOut> a, b;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    (i % 2 ? a : b).push_back({tensors[i].name, tensors[i].shape, tensors[i].data.data()});
    map[tensors[i].name] =
        i % 2 ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  WriteSafetensors(sharded.path() + "/model-00001-of-00002.safetensors", a, {{"format", "pt"}});
  WriteSafetensors(sharded.path() + "/model-00002-of-00002.safetensors", b, {{"format", "pt"}});
  WriteFileAtomic(sharded.path() + "/" + kHfIndexFile,
                  nlohmann::json{{"metadata", {{"total_size", 0}}}, {"weight_map", map}}.dump());
  WriteFileAtomic(sharded.path() + "/config.json", Slurp(one.path() + "/config.json"));
  EXPECT_EQ(ReadHfShape(sharded.path()), layout.shape());
  std::vector<float> from_one(layout.total()), from_shards(layout.total());
  LoadHf(one.path(), layout, from_one.data());
  LoadHf(sharded.path(), layout, from_shards.data());
  EXPECT_EQ(from_one, p);
  EXPECT_EQ(from_shards, p);
  map[tensors[0].name] = "../elsewhere.safetensors";
  WriteFileAtomic(sharded.path() + "/" + kHfIndexFile, nlohmann::json{{"weight_map", map}}.dump());
  EXPECT_THROW(LoadHf(sharded.path(), layout, from_shards.data()), InputError);
}

// Issue 32: a tensor stored in two shards with different values loaded silently, the index's
// copy winning, where transformers loads the later shard's: one directory, two models.
TEST(Llama, TensorInTwoShardsWithDifferentValuesLoadedSilently) {
  const ParamLayout layout(SmallLlama());
  const std::vector<float> p = RandomWeights(layout, 6);
  TempDir one, sharded;
  ExportHf(one.path(), layout, p.data());
  const std::vector<HfTensorData> tensors = ToHfTensors(layout, p.data());
  const char* kFiles[2] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
  nlohmann::json map = nlohmann::json::object();
  std::vector<SafeTensorOut> parts[2];
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    parts[i % 2].push_back({tensors[i].name, tensors[i].shape, tensors[i].data.data()});
    map[tensors[i].name] = kFiles[i % 2];
  }
  // tensors[0] (in the first shard, where the index says) also in the second, another value.
  std::vector<float> other = tensors[0].data;
  for (float& x : other) x += 1.0f;
  parts[1].push_back({tensors[0].name, tensors[0].shape, other.data()});
  for (int k = 0; k < 2; ++k) {
    WriteSafetensors(sharded.path() + "/" + kFiles[k], parts[k], {{"format", "pt"}});
  }
  WriteFileAtomic(sharded.path() + "/" + kHfIndexFile, nlohmann::json{{"weight_map", map}}.dump());
  WriteFileAtomic(sharded.path() + "/config.json", Slurp(one.path() + "/config.json"));
  std::vector<float> back(layout.total());
  try {
    LoadHf(sharded.path(), layout, back.data());
    ADD_FAILURE() << "loaded a tensor stored twice";
  } catch (const InputError& e) {
    const std::string want = "tensor '" + tensors[0].name + "' is stored twice, in '" +
                             sharded.path() + "/" + kFiles[0] + "' and in '" + sharded.path() +
                             "/" + kFiles[1] + "'";
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
  }
}

// Issue 32: rope_scaling {"rope_type": "llama3"} without its factors was accepted with made-up
// defaults (8, 1, 4, 8192); transformers refuses it ("Missing required keys"). Each missing (or
// null) key is refused by name; "default" needs none.
TEST(Llama, Llama3RopeScalingWithoutItsFactorsGotMadeUpDefaults) {
  const nlohmann::json cfg = FamilyOf(Arch::kLlama).to_hf_config(SmallLlama());
  for (const char* key :
       {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}) {
    for (const bool null : {false, true}) {
      nlohmann::json bad = cfg;
      if (null) {
        bad["rope_scaling"][key] = nullptr;
      } else {
        bad["rope_scaling"].erase(key);
      }
      try {
        FamilyOf(Arch::kLlama).from_hf_config(bad, "c.json");
        ADD_FAILURE() << key << " missing, accepted";
      } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find(std::string("rope_scaling of type llama3 has no '") +
                                             key + "'"),
                  std::string::npos)
            << e.what();
      }
    }
  }
  nlohmann::json only_type = cfg;
  only_type["rope_scaling"] = {{"rope_type", "llama3"}};
  EXPECT_THROW(FamilyOf(Arch::kLlama).from_hf_config(only_type, "c.json"), InputError);
  nlohmann::json plain = cfg;
  plain["rope_scaling"] = {{"rope_type", "default"}};
  EXPECT_EQ(FamilyOf(Arch::kLlama).from_hf_config(plain, "c.json").rope_scaling.kind,
            RopeScaling::kNone);
}

// config.json: what Llama configs say (defaults, null num_key_value_heads, rope_scaling), and
// the keys of a model this engine cannot run are refused by name.
TEST(Llama, HfConfigKeysAndRefusals) {
  const Shape s = SmallLlama();
  nlohmann::json cfg = FamilyOf(Arch::kLlama).to_hf_config(s);
  EXPECT_EQ(cfg["num_key_value_heads"], 2);
  EXPECT_EQ(cfg["rope_scaling"]["rope_type"], "llama3");
  EXPECT_EQ(cfg["rms_norm_eps"], 1e-6);
  EXPECT_EQ(FamilyOf(Arch::kLlama).from_hf_config(cfg, "c.json"), s);
  nlohmann::json no_kv = cfg;
  no_kv["num_key_value_heads"] = nullptr;  // transformers' default: as many as the heads
  EXPECT_EQ(FamilyOf(Arch::kLlama).from_hf_config(no_kv, "c.json").kv_heads(), 4);
  nlohmann::json head_dim = cfg;  // LlamaConfig's head_dim apart from hidden / heads
  head_dim["head_dim"] = 16;
  EXPECT_EQ(FamilyOf(Arch::kLlama).from_hf_config(head_dim, "c.json").head_size(), 16);
  for (const auto& [key, value, needle] :
       std::vector<std::tuple<std::string, nlohmann::json, std::string>>{
           {"hidden_act", "gelu", "hidden_act"},
           {"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4}}, "rope_scaling type 'yarn'"},
           {"sliding_window", 4096, "sliding_window"},
           {"num_attention_heads", 0, "num_attention_heads"}}) {
    nlohmann::json bad = cfg;
    bad[key] = value;
    try {
      FamilyOf(Arch::kLlama).from_hf_config(bad, "c.json");
      ADD_FAILURE() << key << " accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
}

TEST(Llama, PresetsAreValidAndHaveTheirParameterCounts) {
  for (const Preset& p : Presets()) EXPECT_EQ(p.shape.Problem(), "") << p.name;
  // Counted without the vocabulary padding (the embedding's rows, and an untied LM head's):
  // SmolLM2-135M and Llama 3.2 1B as published; the encoders as transformers 4.55.4 counts
  // BertForQuestionAnswering(BertConfig()) and DistilBertForQuestionAnswering(DistilBertConfig())
  // (sum of p.numel() over parameters(): no pooler, qa_outputs Linear(768, 2)).
  auto real = [](const Shape& s) {
    const int padded = s.tied || s.encoder() ? 1 : 2;
    return s.ParamCount() - static_cast<std::uint64_t>(s.Vp - s.V) * s.C * padded;
  };
  EXPECT_EQ(real(FindPreset("smollm2-135m")->shape), 134'515'008u);
  EXPECT_EQ(real(FindPreset("llama-1b")->shape), 1'235'814'400u);
  EXPECT_EQ(real(FindPreset("bert-base-qa")->shape), 108'893'186u);
  EXPECT_EQ(real(FindPreset("distilbert-qa")->shape), 66'364'418u);
  // The classifiers, as transformers 4.55.4 counts BertForSequenceClassification(BertConfig(
  // num_labels=2)) (with its pooler) and LlamaForSequenceClassification of SmolLM2's config with
  // num_labels=2 (score Linear(576, 2, bias=False), no LM head).
  EXPECT_EQ(real(FindPreset("bert-base-cls")->shape), 109'483'778u);
  EXPECT_EQ(real(FindPreset("smollm2-135m-cls")->shape), 134'516'160u);
}

}  // namespace
}  // namespace cputrain::model
