// Hugging Face GPT-2 in and out (model/hf.h) and the safetensors format under it
// (model/safetensors.h), against tests/reference/fixtures/hf (written by hf_reference.py with
// its own safetensors writer and an independent HF-layout forward).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "kernels/kernels.h"
#include "model/checkpoint.h"
#include "model/hf.h"
#include "model/safetensors.h"
#include "model/transformer.h"
#include "test_util.h"

namespace cputrain::model {
namespace {

using test::Slurp;
using test::TempDir;
namespace fs = std::filesystem;

std::string HfFixture(const std::string& file = "") {
  const std::string d = std::string(CPUTRAIN_SOURCE_DIR) + "/tests/reference/fixtures/hf";
  return file.empty() ? d : d + "/" + file;
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string U64(std::uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(n >> (8 * i));
  return s;
}

// A safetensors file of `header` followed by `data_bytes` zero bytes.
std::string StFile(const std::string& header, std::size_t data_bytes) {
  return U64(header.size()) + header + std::string(data_bytes, '\0');
}

std::vector<float> LoadParams(const std::string& path, ParamLayout** layout_out = nullptr) {
  static std::unique_ptr<ParamLayout> keep;
  keep = std::make_unique<ParamLayout>(ReadCheckpointShape(path));
  std::vector<float> p(keep->total());
  LoadCheckpoint(path, *keep, p.data());
  if (layout_out) *layout_out = keep.get();
  return p;
}

TEST(HfGpt2, ImportedLogitsMatchPyTorchWithin1e5) {
  kernels::InitBlas();
  ParamLayout* layout = nullptr;
  const std::vector<float> params = LoadParams(HfFixture(), &layout);
  const Shape s = layout->shape();
  EXPECT_EQ(s, (Shape{40, 300, 384, 3, 3, 48}));
  SafetensorsFile ref = SafetensorsFile::Open(HfFixture("logits.safetensors"));
  const SafeTensor* idx = ref.Find("idx");
  const SafeTensor* logits = ref.Find("logits");
  ASSERT_TRUE(idx && logits);
  const int B = static_cast<int>(idx->shape[0]), T = static_cast<int>(idx->shape[1]);
  std::vector<float> ids(idx->numel), want(logits->numel);
  ref.ReadF32(*idx, ids.data());
  ref.ReadF32(*logits, want.data());

  WorkerPool pool(std::vector<int>(1, 0), nullptr, "hf");
  Activations acts(s, B, T, 1);
  std::vector<float> mem(acts.floats(), 0.f);
  std::vector<int> tokens(2 * B * T, 0);
  acts.Bind(mem.data(), tokens.data());
  for (int i = 0; i < B * T; ++i) acts.inputs[i] = static_cast<int>(ids[i]);
  Forward(pool, *layout, params.data(), acts, B, T, false);
  double worst = 0;
  for (int n = 0; n < B * T; ++n)
    for (int v = 0; v < s.V; ++v) {
      const double r = want[n * s.V + v];
      worst =
          std::max(worst, std::fabs(acts.logits[n * s.Vp + v] - r) / std::max(1.0, std::fabs(r)));
    }
  EXPECT_LE(worst, 1e-5);
}

TEST(HfGpt2, ImportThenExportIsByteIdenticalToTheReference) {
  ParamLayout* layout = nullptr;
  const std::vector<float> params = LoadParams(HfFixture(), &layout);
  TempDir dir;
  const std::string out = dir.path() + "/exported";
  ExportHf(out, *layout, params.data());
  EXPECT_EQ(Slurp(out + "/model.safetensors"), Slurp(HfFixture("model.safetensors")));
  EXPECT_EQ(Slurp(out + "/config.json"), Slurp(HfFixture("config.json")));
  // and through llm.c's format: model.bin -> hf is the same again
  SaveCheckpoint(dir.path() + "/model.bin", *layout, params.data());
  const std::vector<float> again = LoadParams(dir.path() + "/model.bin", &layout);
  EXPECT_EQ(again, params);
}

// A directory holding `tensors` (taken from the fixture, renamed/edited by the caller).
struct Variant {
  TempDir dir;
  explicit Variant(const std::function<void(std::vector<SafeTensorOut>&,
                                            std::vector<std::vector<float>>&)>& edit,
                   const std::string& config = Slurp(HfFixture("config.json"))) {
    SafetensorsFile st = SafetensorsFile::Open(HfFixture("model.safetensors"));
    store.reserve(st.tensors().size() + 4);
    std::vector<SafeTensorOut> out;
    for (const SafeTensor& t : st.tensors()) {
      store.emplace_back(t.numel);
      st.ReadF32(t, store.back().data());
      out.push_back({t.name, t.shape, store.back().data()});
    }
    edit(out, store);
    WriteSafetensors(dir.path() + "/model.safetensors", out, {{"format", "pt"}});
    WriteBytes(dir.path() + "/config.json", config);
  }
  std::vector<std::vector<float>> store;
};

TEST(HfGpt2, GPT2ModelNamesBuffersAndATiedLmHeadLoadTheSame) {
  const std::vector<float> want = LoadParams(HfFixture());
  Variant v([](std::vector<SafeTensorOut>& ts, std::vector<std::vector<float>>& store) {
    const float* wte = nullptr;
    for (SafeTensorOut& t : ts) {
      t.name = t.name.substr(std::string("transformer.").size());  // GPT2Model / hub naming
      if (t.name == "wte.weight") wte = t.data;
    }
    ts.push_back({"lm_head.weight", {300, 48}, wte});
    store.emplace_back(40 * 40, 1.0f);
    ts.push_back({"h.0.attn.bias", {1, 1, 40, 40}, store.back().data()});
    store.emplace_back(1, -1e4f);
    ts.push_back({"h.2.attn.masked_bias", {}, store.back().data()});
  });
  EXPECT_EQ(LoadParams(v.dir.path()), want);
}

// The hub's gpt2/config.json carries keys this engine has no use for (the sequence-summary
// head's, task_specific_params, token ids, an older n_ctx): they are ignored, not refused.
TEST(HfGpt2, TheHubsExtraConfigKeysAreIgnored) {
  std::string config = Slurp(HfFixture("config.json"));
  config.replace(config.find("{"), 1,
                 R"({"summary_activation": null, "summary_first_dropout": 0.1,
                     "summary_proj_to_labels": true, "summary_type": "cls_index",
                     "summary_use_proj": true, "bos_token_id": 50256, "eos_token_id": 50256,
                     "task_specific_params": {"text-generation": {"do_sample": true,
                     "max_length": 50}},)");
  Variant v([](auto&, auto&) {}, config);
  EXPECT_EQ(LoadParams(v.dir.path()), LoadParams(HfFixture()));
}

void ExpectRefused(const std::string& dir, const std::string& needle) {
  try {
    LoadParams(dir);
    ADD_FAILURE() << "accepted; expected an error containing: " << needle;
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_FALSE(e.hint().empty());
  }
}

TEST(HfGpt2, AnUntiedLmHeadIsRefused) {
  Variant v([](std::vector<SafeTensorOut>& ts, std::vector<std::vector<float>>& store) {
    store.emplace_back(300 * 48, 0.5f);
    ts.push_back({"lm_head.weight", {300, 48}, store.back().data()});
  });
  ExpectRefused(v.dir.path(), "lm_head.weight differs from the token embedding");
}

TEST(HfGpt2, UnknownMissingOrMisshapenTensorsAreRefusedByName) {
  Variant extra([](std::vector<SafeTensorOut>& ts, std::vector<std::vector<float>>& store) {
    store.emplace_back(2 * 48, 0.f);
    ts.push_back({"score.weight", {2, 48}, store.back().data()});
  });
  ExpectRefused(extra.dir.path(), "'score.weight', which is not part of");
  Variant missing([](std::vector<SafeTensorOut>& ts, std::vector<std::vector<float>>&) {
    std::erase_if(ts, [](const SafeTensorOut& t) { return t.name == "transformer.h.1.ln_2.bias"; });
  });
  ExpectRefused(missing.dir.path(), "no tensor 'transformer.h.1.ln_2.bias'");
  // c_fc stored (out, in) instead of Conv1D's (in, out): the transpose would be wrong
  Variant flipped([](std::vector<SafeTensorOut>& ts, std::vector<std::vector<float>>&) {
    for (SafeTensorOut& t : ts)
      if (t.name == "transformer.h.0.mlp.c_fc.weight") std::swap(t.shape[0], t.shape[1]);
  });
  ExpectRefused(flipped.dir.path(), "has shape [192, 48], config.json implies [48, 192]");
}

TEST(HfGpt2, ConfigsThisEngineCannotRunAreRefusedNamingTheKey) {
  const std::string good = Slurp(HfFixture("config.json"));
  auto with = [&](const std::string& from, const std::string& to) {
    std::string c = good;
    const std::size_t at = c.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return c.replace(at, from.size(), to);
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {with("\"model_type\": \"gpt2\"", "\"model_type\": \"mamba\""),
       "model_type 'mamba' is not a family this engine runs"},
      {with("\"gelu_new\"", "\"relu\""), "activation_function"},
      {with("1e-05", "1e-06"), "layer_norm_epsilon"},
      {with("\"n_inner\": null", "\"n_inner\": 100"), "n_inner"},
      {with("\"n_embd\": 48,", ""), "key 'n_embd' is missing"},
      {with("\"n_head\": 3", "\"n_head\": 5"), "NH (5) does not divide C (48)"},
      {with("\"vocab_size\": 300", "\"vocab_size\": 1e9"), "vocab_size"},
      {with("\"tie_word_embeddings\": true", "\"tie_word_embeddings\": false"),
       "tie_word_embeddings"},
      {"{\"n_embd\": ", "not valid JSON"},
  };
  for (const auto& [config, needle] : cases) {
    Variant v([](auto&, auto&) {}, config);
    ExpectRefused(v.dir.path(), needle);
  }
  TempDir no_weights;
  WriteBytes(no_weights.path() + "/config.json", good);
  ExpectRefused(no_weights.path(), "neither model.safetensors nor model.safetensors.index.json");
}

// safetensors' own writer on its own test vectors (safetensors/src/tensor.rs,
// test_serialization and test_empty): the same bytes.
TEST(Safetensors, WriterMatchesTheReferenceCratesBytes) {
  const float data[6] = {0, 1, 2, 3, 4, 5};
  TempDir dir;
  WriteSafetensors(dir.path() + "/a", {{"attn.0", {1, 2, 3}, data}}, {});
  const std::string header =
      "{\"attn.0\":{\"dtype\":\"F32\",\"shape\":[1,2,3],\"data_offsets\":[0,24]}}";
  EXPECT_EQ(Slurp(dir.path() + "/a"),
            U64(64) + header + std::string(reinterpret_cast<const char*>(data), 24));
  EXPECT_EQ(SafetensorsHeader({}, {{"framework", "pt"}}),
            "{\"__metadata__\":{\"framework\":\"pt\"}}     ");
  EXPECT_EQ(SafetensorsHeader({}, {}), "{}      ");
}

TEST(Safetensors, Bf16AndF16ConvertExactly) {
  // BF16: 1.0 = 0x3f80, -2.5 = 0xc020. F16: 1.0 = 0x3c00, smallest subnormal 0x0001 = 2^-24,
  // 65504 = 0x7bff, -inf = 0xfc00.
  const std::uint16_t bf[2] = {0x3f80, 0xc020}, h[4] = {0x3c00, 0x0001, 0x7bff, 0xfc00};
  const std::string header =
      "{\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]},"
      "\"h\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[4,12]}}";
  TempDir dir;
  WriteBytes(dir.path() + "/x", U64(header.size()) + header +
                                    std::string(reinterpret_cast<const char*>(bf), 4) +
                                    std::string(reinterpret_cast<const char*>(h), 8));
  SafetensorsFile st = SafetensorsFile::Open(dir.path() + "/x");
  float b[2], f[4];
  st.ReadF32(*st.Find("b"), b);
  st.ReadF32(*st.Find("h"), f);
  EXPECT_EQ(b[0], 1.0f);
  EXPECT_EQ(b[1], -2.5f);
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_EQ(f[1], std::ldexp(1.0f, -24));
  EXPECT_EQ(f[2], 65504.0f);
  EXPECT_EQ(f[3], -INFINITY);
}

std::string Entry(const std::string& name, const std::string& dtype, const std::string& shape,
                  std::uint64_t b, std::uint64_t e) {
  return fmt::format(R"("{}":{{"dtype":"{}","shape":{},"data_offsets":[{},{}]}})", name, dtype,
                     shape, b, e);
}

std::string Obj(const std::string& inner) { return fmt::format("{{{}}}", inner); }

// Each file breaks one rule of the reader; each is refused with exit 2 (InputError) and a
// message naming what is wrong.
TEST(Safetensors, HostileFilesAreRefusedWithTheReason) {
  const std::string ok = Entry("a", "F32", "[2]", 0, 8);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"short", "shorter than the 8-byte header length"},
      {U64(100'000'001) + "{}", "above safetensors' limit"},
      {U64(64) + "{}", "runs past the end"},
      {StFile("{\"a\":", 0), "not valid UTF-8 JSON"},
      {StFile("{\"\xff\":1}", 0), "not valid UTF-8 JSON"},
      {StFile("[1,2]", 0), "not a JSON object"},
      {StFile(Obj(Entry("a", "F33", "[2]", 0, 8)), 8), "dtype \"F33\""},
      {StFile("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8), "exactly"},
      {StFile(Obj(Entry("a", "F32", "[-2]", 0, 8)), 8), "not an integer >= 0"},
      {StFile(Obj(Entry("a", "F32", "[2.0]", 0, 8)), 8), "not an integer >= 0"},
      {StFile(Obj(Entry("a", "F32", "[4294967296,4294967296]", 0, 8)), 8),
       "product of its shape overflows"},
      {StFile(Obj(Entry("a", "F32", "[4611686018427387904]", 0, 8)), 8), "size in bytes overflows"},
      {StFile(Obj(Entry("a", "F32", "[3]", 0, 8)), 8), "span 8 bytes but F32 of shape [3]"},
      {StFile(Obj(Entry("a", "F32", "[2]", 8, 0)), 8), "span 0 bytes"},
      {StFile(Obj(Entry("a", "F32", "[2]", 4, 12)), 12), "(a gap)"},
      {StFile(Obj(ok + "," + Entry("b", "F32", "[2]", 4, 12)), 12), "(they overlap)"},
      {StFile(Obj(ok), 9), "(trailing bytes)"},
      // A repeated name: JSON parsing keeps the last entry, so the first one's bytes are left
      // uncovered and the tiling check refuses the file.
      {StFile(Obj(ok + "," + Entry("a", "F32", "[2]", 8, 16)), 16), "(a gap)"},
      {StFile(Obj(ok), 4), "(truncated)"},
      {StFile(Obj("\"__metadata__\":{\"format\":1}," + ok), 8), "__metadata__ 'format'"},
  };
  TempDir dir;
  for (const auto& [bytes, needle] : cases) {
    WriteBytes(dir.path() + "/bad.safetensors", bytes);
    try {
      SafetensorsFile::Open(dir.path() + "/bad.safetensors");
      ADD_FAILURE() << "accepted; expected: " << needle;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
}

TEST(Safetensors, OtherDtypesOfTheFormatAreListedButRefusedByNameWhenRead) {
  TempDir dir;
  WriteBytes(dir.path() + "/i", StFile(Obj(Entry("m", "I64", "[1]", 0, 8)), 8));
  SafetensorsFile st = SafetensorsFile::Open(dir.path() + "/i");
  float x;
  try {
    st.ReadF32(*st.Find("m"), &x);
    ADD_FAILURE() << "I64 read as float";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'm' is I64"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cputrain::model
