// PEFT adapters (model/peft.h): WriteAdapter -> ReadAdapterConfig / LoadAdapter gives back every
// float bit for bit and the config's values, for GPT-2 (c_attn, a Conv1D), Llama (all seven
// linear layers, GQA) and BERT question answering (query, value, qa_outputs saved); the names
// PEFT gives the tensors (checked against peft itself by tests/reference/peft_parity.py); and
// every bad file refused with exit 2, naming the file. Merging, PEFT loading what we write, and
// generate --adapter are checked against peft in tests/reference/peft_parity.py.
#include "model/peft.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/files.h"
#include "model/lora.h"
#include "model/safetensors.h"
#include "test_util.h"

namespace cputrain::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::Slurp;
using test::TempDir;

Shape SmallGpt2() { return Shape(32, 300, Shape::PadVocab(300), 2, 4, 32); }

// GQA (4 query heads over 2 KV heads), untied, a SwiGLU MLP of F = 48.
Shape SmallLlama() {
  Shape s(32, 300, Shape::PadVocab(300), 2, 4, 32);
  s.arch = Arch::kLlama;
  s.NKV = 2;
  s.F = 48;
  s.tied = false;
  s.attn_bias = s.mlp_bias = false;
  return s;
}

Shape SmallBertQa() {
  Shape s(64, 300, Shape::PadVocab(300), 2, 4, 32);
  s.arch = Arch::kBert;
  s.F = 48;
  s.norm_eps = 1e-12f;
  s.tied = false;
  s.head = Head::kSpan;
  s.types = 2;
  s.pad_token = 0;
  return s;
}

LoraConfig Config(int r, float alpha, std::vector<std::string> targets,
                  std::vector<std::string> save = {}) {
  LoraConfig c;
  c.r = r;
  c.alpha = alpha;
  c.target_modules = std::move(targets);
  c.modules_to_save = std::move(save);
  return c;
}

// A trainable buffer whose every float differs (A and B random, saved modules perturbed), so a
// tensor read into the wrong place shows.
std::vector<float> Values(const Lora& lora, const std::vector<float>& base, uint64_t seed) {
  LoraConfig c = lora.config();
  c.init = LoraConfig::Init::kRandom;
  const Lora random(lora.base(), c);
  WorkerPool pool(std::vector<int>(1, 0), nullptr, "init");
  std::vector<float> p(lora.layout().total());
  LoraInit(pool, random, seed, base.data(), p.data());
  for (std::size_t i = 0; i < p.size(); ++i) p[i] += 1e-3f * std::sin(0.37f * i);
  // Padding rows stay zero: a file holds the real rows only.
  for (const TensorInfo& info : lora.layout().tensors()) {
    if (info.real_rows == 0) continue;
    const std::size_t cols = info.numel / info.shape[0];
    float* t = p.data() + lora.layout().offset(info.t);
    std::fill(t + info.real_rows * cols, t + info.numel, 0.f);
  }
  return p;
}

std::vector<float> BaseValues(const ParamLayout& layout) {
  WorkerPool pool(std::vector<int>(1, 0), nullptr, "init");
  std::vector<float> p(layout.total());
  RandomInit(pool, layout, 7, p.data());
  return p;
}

// Writes, reads back, and compares: the config's values and every float, bit for bit.
void RoundTrip(const ParamLayout& base, const LoraConfig& cfg, const std::string& task,
               bool fan_in_fan_out) {
  TempDir dir;
  const Lora lora(base, cfg);
  const std::vector<float> p = Values(lora, BaseValues(base), 11);
  WriteAdapter(dir.path(), lora, p.data(), "/models/base");

  const AdapterInfo info = ReadAdapterConfig(dir.path());
  EXPECT_EQ(info.cfg.r, cfg.r);
  EXPECT_EQ(info.cfg.alpha, cfg.alpha);
  EXPECT_EQ(info.cfg.dropout, cfg.dropout);
  EXPECT_EQ(info.cfg.init, cfg.init);
  EXPECT_EQ(info.cfg.rslora, cfg.rslora);
  EXPECT_EQ(info.cfg.target_modules, lora.TargetNames());
  EXPECT_EQ(info.cfg.modules_to_save, lora.SavedNames());
  EXPECT_EQ(info.task_type, task);
  EXPECT_EQ(info.fan_in_fan_out, fan_in_fan_out);
  EXPECT_EQ(info.base_model_name_or_path, "/models/base");

  const std::unique_ptr<Lora> back = OpenAdapter(dir.path(), base);
  ASSERT_EQ(back->layout().total(), lora.layout().total());
  EXPECT_EQ(back->scale(), lora.scale());
  std::vector<float> q(back->layout().total(), -1.f);
  LoadAdapter(dir.path(), *back, q.data());
  EXPECT_EQ(std::memcmp(p.data(), q.data(), p.size() * sizeof(float)), 0);
}

// The tensors of the written file: name -> shape.
std::map<std::string, std::vector<std::uint64_t>> Tensors(const std::string& dir) {
  SafetensorsFile f = SafetensorsFile::Open(dir + "/" + kAdapterFile);
  std::map<std::string, std::vector<std::uint64_t>> out;
  for (const SafeTensor& t : f.tensors()) out[t.name] = t.shape;
  EXPECT_EQ(f.metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
  return out;
}

TEST(PeftRoundTrip, Gpt2CAttn) {
  const ParamLayout base(SmallGpt2());
  RoundTrip(base, Config(4, 8, {}), "CAUSAL_LM", true);
  // PEFT's names and shapes: A [r, in], B [out, r] whatever Conv1D's storage.
  TempDir dir;
  const Lora lora(base, Config(4, 8, {}));
  WriteAdapter(dir.path(), lora, Values(lora, BaseValues(base), 1).data(), "");
  const auto t = Tensors(dir.path());
  EXPECT_EQ(t.size(), 4u);
  EXPECT_EQ(t.at("base_model.model.transformer.h.1.attn.c_attn.lora_A.weight"),
            (std::vector<std::uint64_t>{4, 32}));
  EXPECT_EQ(t.at("base_model.model.transformer.h.1.attn.c_attn.lora_B.weight"),
            (std::vector<std::uint64_t>{96, 4}));
  const json cfg = json::parse(Slurp(dir.path() + "/" + kAdapterConfigFile));
  EXPECT_EQ(cfg["target_modules"], json({"c_attn"}));
  EXPECT_TRUE(cfg["base_model_name_or_path"].is_null());
  EXPECT_TRUE(cfg["modules_to_save"].is_null());
  EXPECT_EQ(cfg["peft_type"], "LORA");
  EXPECT_EQ(cfg["lora_alpha"], json(8));
  EXPECT_EQ(cfg["init_lora_weights"], json(true));
  EXPECT_EQ(cfg.size(), 41u);  // every key peft 0.21.2 writes for a LoraConfig
}

TEST(PeftRoundTrip, LlamaAllSevenTargetsRsloraGaussian) {
  const ParamLayout base(SmallLlama());
  LoraConfig c =
      Config(6, 12, {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"});
  c.dropout = 0.05f;
  c.rslora = true;
  c.init = LoraConfig::Init::kGaussian;
  RoundTrip(base, c, "CAUSAL_LM", false);
  TempDir dir;
  const Lora lora(base, c);
  WriteAdapter(dir.path(), lora, Values(lora, BaseValues(base), 2).data(), "");
  const auto t = Tensors(dir.path());
  EXPECT_EQ(t.size(), 2u * 7 * 2);
  // k and v: 2 KV heads of 8; gate and up: F rows each; down: in = F.
  EXPECT_EQ(t.at("base_model.model.model.layers.1.self_attn.k_proj.lora_B.weight"),
            (std::vector<std::uint64_t>{16, 6}));
  EXPECT_EQ(t.at("base_model.model.model.layers.0.mlp.up_proj.lora_B.weight"),
            (std::vector<std::uint64_t>{48, 6}));
  EXPECT_EQ(t.at("base_model.model.model.layers.0.mlp.down_proj.lora_A.weight"),
            (std::vector<std::uint64_t>{6, 48}));
  const json cfg = json::parse(Slurp(dir.path() + "/" + kAdapterConfigFile));
  EXPECT_EQ(cfg["lora_dropout"].dump(), "0.05");
  EXPECT_EQ(cfg["init_lora_weights"], "gaussian");
  EXPECT_EQ(cfg["use_rslora"], true);
  EXPECT_EQ(cfg["target_modules"],
            json({"down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"}));
  EXPECT_FLOAT_EQ(lora.scale(), 12.f / std::sqrt(6.f));
}

TEST(PeftRoundTrip, BertQaQueryValueAndQaOutputs) {
  const ParamLayout base(SmallBertQa());
  RoundTrip(base, Config(4, 8, {"query", "value"}), "QUESTION_ANS", false);
  TempDir dir;
  const Lora lora(base, Config(4, 8, {"query", "value"}));
  WriteAdapter(dir.path(), lora, Values(lora, BaseValues(base), 3).data(), "");
  const auto t = Tensors(dir.path());
  EXPECT_EQ(t.size(), 2u * 2 * 2 + 2);
  EXPECT_EQ(t.at("base_model.model.bert.encoder.layer.0.attention.self.value.lora_B.weight"),
            (std::vector<std::uint64_t>{32, 4}));
  EXPECT_EQ(t.at("base_model.model.qa_outputs.weight"), (std::vector<std::uint64_t>{2, 32}));
  EXPECT_EQ(t.at("base_model.model.qa_outputs.bias"), (std::vector<std::uint64_t>{2}));
  const json cfg = json::parse(Slurp(dir.path() + "/" + kAdapterConfigFile));
  EXPECT_EQ(cfg["modules_to_save"], json({"qa_outputs"}));
  EXPECT_EQ(cfg["task_type"], "QUESTION_ANS");
}

// A saved Conv1D weight is stored transposed, a saved vocabulary tensor with its V real rows.
TEST(PeftRoundTrip, SavedConv1DTransposedAndVocabularyUnpadded) {
  const ParamLayout base(SmallGpt2());
  RoundTrip(base, Config(2, 4, {"c_attn"}, {"mlp.c_proj", "wpe", "wte"}), "CAUSAL_LM", true);
  TempDir dir;
  const Lora lora(base, Config(2, 4, {"c_attn"}, {"mlp.c_proj", "wte"}));
  WriteAdapter(dir.path(), lora, Values(lora, BaseValues(base), 4).data(), "");
  const auto t = Tensors(dir.path());
  EXPECT_EQ(t.at("base_model.model.transformer.h.1.mlp.c_proj.weight"),
            (std::vector<std::uint64_t>{128, 32}));
  EXPECT_EQ(t.at("base_model.model.transformer.h.1.mlp.c_proj.bias"),
            (std::vector<std::uint64_t>{32}));
  EXPECT_EQ(t.at("base_model.model.transformer.wte.weight"), (std::vector<std::uint64_t>{300, 32}));
}

// target_modules and modules_to_save as written: the shortest unambiguous ending, else the module
// in every layer by its full path (PEFT's own spelling of "all-linear").
TEST(PeftNames, ShortestUnambiguousElseEveryLayer) {
  const ParamLayout gpt2(SmallGpt2());
  EXPECT_EQ(Lora(gpt2, Config(2, 4, {"c_attn", "attn.c_proj"})).TargetNames(),
            (std::vector<std::string>{"attn.c_proj", "c_attn"}));
  EXPECT_EQ(Lora(gpt2, Config(2, 4, {"all-linear"})).TargetNames(),
            (std::vector<std::string>{"c_attn", "c_fc", "c_proj"}));
  // PEFT's save of target_modules="all-linear": every layer's module by its path.
  std::vector<std::string> paths;
  for (int l = 0; l < 2; ++l)
    for (const char* m : {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"})
      paths.push_back("transformer.h." + std::to_string(l) + "." + m);
  EXPECT_EQ(Lora(gpt2, Config(2, 4, paths)).TargetNames(),
            (std::vector<std::string>{"c_attn", "c_fc", "c_proj"}));

  // BERT's FFN output (layer.N.output.dense) has no ending that attention.output.dense lacks.
  const ParamLayout bert(SmallBertQa());
  const std::vector<std::string> out_dense = {"bert.encoder.layer.0.output.dense",
                                              "bert.encoder.layer.1.output.dense"};
  const Lora lora(bert, Config(2, 4, out_dense));
  EXPECT_EQ(lora.TargetNames(), out_dense);
  EXPECT_EQ(lora.sites().size(), 1u);
  EXPECT_EQ(lora.sites()[0].base, kFcprojw);
  EXPECT_EQ(Lora(bert, Config(2, 4, {"dense", "query", "key", "value"})).TargetNames(),
            (std::vector<std::string>{"dense", "key", "query", "value"}));
  RoundTrip(bert, Config(2, 4, out_dense), "QUESTION_ANS", false);

  // One layer only: refused (every layer gets the same adapters).
  try {
    Lora(bert, Config(2, 4, {"bert.encoder.layer.1.output.dense"}));
    ADD_FAILURE() << "a target in one layer only was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("in 1 of its 2 layers only"), std::string::npos)
        << e.what();
  }
}

// ---- bad files: each an InputError (exit 2) naming the file ----

struct Fixture {
  TempDir dir;
  ParamLayout base{SmallLlama()};
  std::unique_ptr<Lora> lora;
  std::vector<float> p;
  Fixture() {
    lora = std::make_unique<Lora>(base, Config(4, 8, {"q_proj", "v_proj"}));
    p = Values(*lora, BaseValues(base), 5);
    WriteAdapter(dir.path(), *lora, p.data(), "");
  }
  std::string config() const { return dir.path() + "/" + kAdapterConfigFile; }
  std::string weights() const { return dir.path() + "/" + kAdapterFile; }
  void EditConfig(const std::function<void(json&)>& edit) const {
    json c = json::parse(Slurp(config()));
    edit(c);
    WriteFileAtomic(config(), c.dump(2));
  }
  // The weights rewritten as F32 with `edit` applied to (name -> (shape, data)).
  using Map = std::map<std::string, std::pair<std::vector<std::uint64_t>, std::vector<float>>>;
  void EditWeights(const std::function<void(Map&)>& edit) const {
    SafetensorsFile f = SafetensorsFile::Open(weights());
    Map m;
    for (const SafeTensor& t : f.tensors()) {
      std::vector<float> d(t.numel);
      f.ReadF32(t, d.data());
      m[t.name] = {t.shape, d};
    }
    edit(m);
    std::vector<SafeTensorOut> out;
    for (const auto& [name, v] : m) out.push_back({name, v.first, v.second.data()});
    WriteSafetensors(weights(), out, {{"format", "pt"}});
  }
  // What opening and loading the adapter throws: "message | hint".
  std::string Error() const {
    try {
      const std::unique_ptr<Lora> l = OpenAdapter(dir.path(), base);
      std::vector<float> q(l->layout().total());
      LoadAdapter(dir.path(), *l, q.data());
    } catch (const InputError& e) {
      EXPECT_EQ(e.exit_code(), 2);
      return std::string(e.what()) + " | " + e.hint();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not an InputError: " << e.what();
      return "";
    }
    ADD_FAILURE() << "no error";
    return "";
  }
};

using Map = Fixture::Map;

void ExpectHas(const std::string& msg, const std::string& part) {
  EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' not in: " << msg;
}

const char* const kA0 = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight";

TEST(PeftBadFiles, MissingConfig) {
  Fixture f;
  fs::remove(f.config());
  ExpectHas(f.Error(), f.config());
}

TEST(PeftBadFiles, NotADirectory) {
  Fixture f;
  const std::string msg = [&] {
    try {
      ReadAdapterConfig(f.weights());
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  }();
  ExpectHas(msg, f.weights() + "' is not a directory");
}

TEST(PeftBadFiles, BadJson) {
  Fixture f;
  WriteFileAtomic(f.config(), "{\"peft_type\": \"LORA\", ");
  const std::string msg = f.Error();
  ExpectHas(msg, f.config());
  ExpectHas(msg, "not valid JSON");
}

TEST(PeftBadFiles, WrongPeftType) {
  Fixture f;
  f.EditConfig([](json& c) { c["peft_type"] = "IA3"; });
  const std::string msg = f.Error();
  ExpectHas(msg, f.config());
  ExpectHas(msg, "peft_type is \"IA3\"");
  ExpectHas(msg, "merge_and_unload");
}

TEST(PeftBadFiles, UnsupportedSettingsByName) {
  const std::vector<std::pair<std::string, json>> cases = {
      {"use_dora", true},
      {"rank_pattern", {{"q_proj", 8}}},
      {"alpha_pattern", {{"q_proj", 8}}},
      {"layers_to_transform", {0}},
      {"layers_pattern", "layers"},
      {"bias", "lora_only"},
      {"target_modules", ".*\\.(q|v)_proj"},
      {"init_lora_weights", "pissa"},
      {"lora_bias", true},
      {"some_future_setting", 3},
  };
  for (const auto& [key, value] : cases) {
    Fixture f;
    // Captured by name: clang 14 (the sanitizer build's) cannot capture a structured binding.
    f.EditConfig([&k = key, &v = value](json& c) { c[k] = v; });
    const std::string msg = f.Error();
    ExpectHas(msg, f.config());
    ExpectHas(msg, key);
  }
}

TEST(PeftBadFiles, TaskTypeOfAnotherHead) {
  Fixture f;
  f.EditConfig([](json& c) { c["task_type"] = "QUESTION_ANS"; });
  const std::string msg = f.Error();
  ExpectHas(msg, f.config());
  ExpectHas(msg, "task_type is QUESTION_ANS");
}

TEST(PeftBadFiles, TargetNotInTheModel) {
  Fixture f;
  f.EditConfig([](json& c) { c["target_modules"] = {"q_proj", "c_attn"}; });
  const std::string msg = f.Error();
  ExpectHas(msg, f.dir.path());
  ExpectHas(msg, "'c_attn' is not in this llama model");
}

TEST(PeftBadFiles, MissingTensor) {
  Fixture f;
  f.EditWeights([](Map& m) { m.erase(kA0); });
  const std::string msg = f.Error();
  ExpectHas(msg, f.weights());
  ExpectHas(msg, std::string("has no tensor '") + kA0 + "'");
}

TEST(PeftBadFiles, WrongShape) {
  Fixture f;
  // r = 4 in the config, 3 rows in the file.
  f.EditWeights([](Map& m) {
    m[kA0].first[0] = 3;
    m[kA0].second.resize(3 * 32);
  });
  const std::string msg = f.Error();
  ExpectHas(msg, f.weights());
  ExpectHas(msg, std::string(kA0) + "' has shape [3, 32], expected [4, 32] (r = 4)");
}

TEST(PeftBadFiles, ExtraTensor) {
  Fixture f;
  const std::string extra =
      "base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector";
  f.EditWeights([&](Map& m) { m[extra] = {{32}, std::vector<float>(32, 1.f)}; });
  const std::string msg = f.Error();
  ExpectHas(msg, f.weights());
  ExpectHas(msg, "holds tensor '" + extra + "'");
  ExpectHas(msg, "DoRA");
}

TEST(PeftBadFiles, NaN) {
  Fixture f;
  f.EditWeights([](Map& m) { m[kA0].second[37] = NAN; });
  const std::string msg = f.Error();
  ExpectHas(msg, f.weights());
  ExpectHas(msg, std::string(kA0) + "' element 37 is nan");
}

TEST(PeftBadFiles, TruncatedSafetensors) {
  Fixture f;
  const std::string bytes = Slurp(f.weights());
  WriteFileAtomic(f.weights(), bytes.substr(0, bytes.size() - 100));
  const std::string msg = f.Error();
  ExpectHas(msg, f.weights());
  ExpectHas(msg, "truncated");
}

TEST(PeftBadFiles, PickleWeightsOnly) {
  Fixture f;
  fs::rename(f.weights(), f.dir.path() + "/adapter_model.bin");
  const std::string msg = f.Error();
  ExpectHas(msg, "adapter_model.bin");
  ExpectHas(msg, "save_file(torch.load(");
}

// BF16 weights (a PEFT adapter saved from a bf16 model) are read, widened exactly.
TEST(PeftDtypes, Bf16) {
  Fixture f;
  SafetensorsFile in = SafetensorsFile::Open(f.weights());
  std::string header = "{\"__metadata__\":{\"format\":\"pt\"}";
  std::string data;
  std::vector<float> want(f.p.size(), 0.f);
  for (const SafeTensor& t : in.tensors()) {
    std::vector<float> v(t.numel);
    in.ReadF32(t, v.data());
    header +=
        fmt::format(",\"{}\":{{\"dtype\":\"BF16\",\"shape\":[{},{}],\"data_offsets\":[{},{}]}}",
                    t.name, t.shape[0], t.shape[1], data.size(), data.size() + 2 * t.numel);
    for (float x : v) {
      std::uint32_t bits;
      std::memcpy(&bits, &x, 4);
      const std::uint16_t b = static_cast<std::uint16_t>(bits >> 16);
      data.append(reinterpret_cast<const char*>(&b), 2);
    }
  }
  header += "}";
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>(header.size() >> (8 * i));
  WriteFileAtomic(f.weights(), file + header + data);
  std::vector<float> q(f.lora->layout().total());
  LoadAdapter(f.dir.path(), *f.lora, q.data());
  for (std::size_t i = 0; i < q.size(); ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, &f.p[i], 4);
    ASSERT_EQ(q[i], Bf16ToFloat(static_cast<std::uint16_t>(bits >> 16))) << i;
  }
}

}  // namespace
}  // namespace cputrain::model
