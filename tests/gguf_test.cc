// export --format gguf (model/gguf.h) read back by a reader written here from the GGUF layout
// (docs/gguf.md): llama.cpp's tensor names and shapes for Llama, q/k rows in llama.cpp's rotary
// order (NH query heads, NKV key heads), the vocabulary's V rows (not the padded Vp), Q8_0 blocks
// as ggml's reference quantizer makes them, the types convert_hf_to_gguf.py picks (norms F32,
// Q8_0 falling back to F16 on rows of 80), the tokenizer keys (tokens padded with [PAD<id>],
// token types, merges, special ids, the chat template), and the refusals: BERT, a tokenizer
// llama.cpp cannot reproduce, a vocabulary larger than the model's, and the CLI's exit 2 with
// nothing written. Parity with llama.cpp itself is tests/reference/gguf_parity.py.
#include "model/gguf.h"

#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <variant>
#include <vector>

#include "common/error.h"
#include "data/hf_pretokenizer.h"
#include "data/vocab_list.h"
#include "model/checkpoint.h"
#include "model/params.h"
#include "runtime/worker_pool.h"
#include "test_util.h"

namespace cputrain::model {
namespace {

namespace fs = std::filesystem;
using Value = std::variant<std::uint64_t, double, bool, std::string, std::vector<std::string>,
                           std::vector<double>>;

// A GGUF file as this test reads it: key-values and tensor infos, and the file's bytes.
struct Gguf {
  std::map<std::string, Value> kv;
  struct Info {
    std::vector<std::uint64_t> ne;  // innermost first
    std::uint32_t type;
    std::uint64_t offset;
  };
  std::map<std::string, Info> tensors;
  std::vector<std::string> order;
  std::string bytes;
  std::size_t data_start = 0;
  const char* Data(const std::string& name) const {
    return bytes.data() + data_start + tensors.at(name).offset;
  }
};

class Cursor {
 public:
  explicit Cursor(const std::string& b) : b_(b) {}
  template <typename T>
  T Get() {
    T v;
    std::memcpy(&v, b_.data() + at_, sizeof v);
    at_ += sizeof v;
    return v;
  }
  std::string Str() {
    const auto n = Get<std::uint64_t>();
    std::string s = b_.substr(at_, n);
    at_ += n;
    return s;
  }
  // One value of GGUF type t (arrays of strings and numbers).
  Value Read(std::uint32_t t) {
    switch (t) {
      case 4:
        return std::uint64_t{Get<std::uint32_t>()};
      case 5:
        return static_cast<double>(Get<std::int32_t>());
      case 6:
        return static_cast<double>(Get<float>());
      case 7:
        return Get<std::uint8_t>() != 0;
      case 8:
        return Str();
      case 9: {
        const auto et = Get<std::uint32_t>();
        const auto n = Get<std::uint64_t>();
        std::vector<std::string> s;
        std::vector<double> d;
        for (std::uint64_t i = 0; i < n; ++i) {
          Value v = Read(et);
          if (et == 8)
            s.push_back(std::get<std::string>(v));
          else
            d.push_back(std::get<double>(v));
        }
        if (et == 8) return s;
        return d;
      }
    }
    ADD_FAILURE() << "unexpected GGUF value type " << t;
    return false;
  }
  std::size_t at() const { return at_; }

 private:
  const std::string& b_;
  std::size_t at_ = 0;
};

Gguf ReadGguf(const std::string& path) {
  Gguf g;
  g.bytes = test::Slurp(path);
  Cursor c(g.bytes);
  EXPECT_EQ(g.bytes.substr(0, 4), "GGUF");
  c.Get<std::uint32_t>();
  EXPECT_EQ(c.Get<std::uint32_t>(), 3u);
  const auto n_tensors = c.Get<std::uint64_t>();
  const auto n_kv = c.Get<std::uint64_t>();
  for (std::uint64_t i = 0; i < n_kv; ++i) {
    std::string key = c.Str();
    g.kv[key] = c.Read(c.Get<std::uint32_t>());
  }
  for (std::uint64_t i = 0; i < n_tensors; ++i) {
    std::string name = c.Str();
    Gguf::Info info;
    const auto dims = c.Get<std::uint32_t>();
    for (std::uint32_t d = 0; d < dims; ++d) info.ne.push_back(c.Get<std::uint64_t>());
    info.type = c.Get<std::uint32_t>();
    info.offset = c.Get<std::uint64_t>();
    EXPECT_EQ(info.offset % 32, 0u) << name;
    g.order.push_back(name);
    g.tensors[name] = info;
  }
  g.data_start = (c.at() + 31) / 32 * 32;
  return g;
}

// A byte-level BPE tokenizer.json (GPT-2's pre-tokenizer, or Llama 3's Split without
// ignore_merges) of five tokens, the merge that makes "ab" (or none), an added <|endoftext|>,
// and a tokenizer_config.json with a chat template.
std::string WriteTokenizer(const std::string& dir, bool prefix_space = false, bool llama3 = false,
                           bool merge = true) {
  fs::create_directories(dir);
  const nlohmann::json byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", prefix_space}, {"use_regex", !llama3}};
  const nlohmann::json split = {{"type", "Split"},
                                {"pattern", {{"Regex", data::kLlama3SplitPattern}}},
                                {"behavior", "Isolated"},
                                {"invert", false}};
  const nlohmann::json tok = {
      {"model",
       {{"type", "BPE"},
        {"vocab", {{"a", 0}, {"b", 1}, {"ab", 2}, {"\xc4\xa0", 3}}},
        {"merges", merge ? nlohmann::json{"a b"} : nlohmann::json::array()}}},
      {"added_tokens",
       {{{"id", 4}, {"content", "<|endoftext|>"}, {"special", true}, {"normalized", false}}}},
      {"pre_tokenizer",
       llama3 ? nlohmann::json{{"type", "Sequence"}, {"pretokenizers", {split, byte_level}}}
              : byte_level},
      {"decoder", {{"type", "ByteLevel"}}}};
  std::ofstream(dir + "/tokenizer.json") << tok.dump();
  std::ofstream(dir + "/tokenizer_config.json")
      << nlohmann::json{{"eos_token", "<|endoftext|>"}, {"chat_template", "{{ messages }}"}}.dump();
  return dir;
}

Shape LlamaShape() {
  Shape s(64, 6, Shape::PadVocab(6), 2, 4, 64);
  s.arch = Arch::kLlama;
  s.NKV = 2;
  s.F = 80;
  s.tied = false;
  s.attn_bias = s.mlp_bias = false;
  return s;
}

std::vector<float> Params(const ParamLayout& layout) {
  WorkerPool pool(std::vector<int>(1, 0), nullptr, "gguf");
  std::vector<float> p(layout.total());
  RandomInit(pool, layout, 7, p.data());
  return p;
}

TEST(Gguf, LlamaTensorsUnderLlamaCppNamesWithQkInRotaryOrder) {
  test::TempDir tmp;
  const ParamLayout layout(LlamaShape());
  const std::vector<float> p = Params(layout);
  const data::VocabList v = data::ListVocab(WriteTokenizer(tmp.path() + "/tok"), 6);
  const std::string path = tmp.path() + "/m.gguf";
  ExportGguf(path, layout, p.data(), v, GgufOutType::kF32, "m");
  const Gguf g = ReadGguf(path);
  EXPECT_EQ(std::get<std::string>(g.kv.at("general.architecture")), "llama");
  EXPECT_EQ(std::get<std::uint64_t>(g.kv.at("llama.attention.head_count_kv")), 2u);
  EXPECT_EQ(std::get<std::uint64_t>(g.kv.at("llama.feed_forward_length")), 80u);
  EXPECT_EQ(g.tensors.size(), 3u + 9u * 2);  // token_embd, output_norm, output; 9 per block
  EXPECT_EQ(g.order.front(), "token_embd.weight");
  // V rows, not Vp; (rows, cols) written innermost first.
  EXPECT_EQ(g.tensors.at("token_embd.weight").ne, (std::vector<std::uint64_t>{64, 6}));
  EXPECT_EQ(g.tensors.at("blk.1.attn_k.weight").ne, (std::vector<std::uint64_t>{64, 32}));
  EXPECT_EQ(g.tensors.at("blk.1.ffn_down.weight").ne, (std::vector<std::uint64_t>{80, 64}));
  const std::size_t hs = 16, half = 8, C = 64;
  const float* qkv = p.data() + layout.offset(kQkvw, 1);
  for (auto [name, first_row, heads] :
       {std::tuple{"blk.1.attn_q.weight", 0, 4}, std::tuple{"blk.1.attn_k.weight", 64, 2}}) {
    const auto* q = reinterpret_cast<const float*>(g.Data(name));
    for (std::size_t h = 0; h < static_cast<std::size_t>(heads); ++h)
      for (std::size_t i = 0; i < half; ++i)
        for (std::size_t j = 0; j < 2; ++j)
          ASSERT_EQ(std::memcmp(q + (h * hs + 2 * i + j) * C,
                                qkv + (first_row + h * hs + j * half + i) * C, C * 4),
                    0)
              << name << " head " << h << " pair " << i;
  }
  // v and up are plain row ranges of the fused tensors.
  EXPECT_EQ(std::memcmp(g.Data("blk.0.attn_v.weight"), p.data() + layout.offset(kQkvw, 0) + 96 * C,
                        32 * C * 4),
            0);
  EXPECT_EQ(std::memcmp(g.Data("blk.0.ffn_up.weight"), p.data() + layout.offset(kFcw, 0) + 80 * C,
                        80 * C * 4),
            0);
  EXPECT_FALSE(fs::exists(path + ".tmp." + std::to_string(getpid())));
}

TEST(Gguf, Q8BlocksAsGgmlAndNormsStayF32AndShortRowsFallBackToF16) {
  test::TempDir tmp;
  const ParamLayout layout(LlamaShape());
  std::vector<float> p = Params(layout);
  float* embd = p.data() + layout.offset(kWte);
  embd[0] = 0.5f, embd[1] = -1.27f, embd[2] = 0.0049f;  // block 0's max |x| is 1.27
  const data::VocabList v = data::ListVocab(WriteTokenizer(tmp.path() + "/tok"), 6);
  const std::string path = tmp.path() + "/q.gguf";
  const GgufSummary sum = ExportGguf(path, layout, p.data(), v, GgufOutType::kQ8_0, "q");
  const Gguf g = ReadGguf(path);
  EXPECT_EQ(g.tensors.at("token_embd.weight").type, 8u);       // Q8_0
  EXPECT_EQ(g.tensors.at("blk.0.attn_norm.weight").type, 0u);  // F32
  EXPECT_EQ(g.tensors.at("blk.0.ffn_down.weight").type, 1u);   // F16: rows of 80
  EXPECT_EQ(g.tensors.at("blk.0.ffn_gate.weight").type, 8u);   // rows of 64
  EXPECT_EQ(sum.f16_fallback, 2u);
  EXPECT_EQ(std::get<std::uint64_t>(g.kv.at("general.file_type")), 7u);
  // Block 0: d = fp16(1.27 / 127), q = round(x * (1 / d)).
  const char* b = g.Data("token_embd.weight");
  std::uint16_t d16;
  std::memcpy(&d16, b, 2);
  const float d = 1.27f / 127.0f;
  EXPECT_EQ(d16, _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT));
  const auto* q = reinterpret_cast<const std::int8_t*>(b + 2);
  EXPECT_EQ(q[0], static_cast<std::int8_t>(std::round(0.5f * (1.0f / d))));
  EXPECT_EQ(q[1], -127);
  EXPECT_EQ(q[2], 0);
  for (int i = 0; i < 32; ++i) EXPECT_NEAR(q[i] * _cvtsh_ss(d16), embd[i], 0.5f * d + 1e-6f) << i;
}

TEST(Gguf, TokenizerKeysListEveryIdWithItsKind) {
  test::TempDir tmp;
  const ParamLayout layout(LlamaShape());
  const std::vector<float> p = Params(layout);
  const data::VocabList v = data::ListVocab(WriteTokenizer(tmp.path() + "/tok"), 6);
  const std::string path = tmp.path() + "/t.gguf";
  ExportGguf(path, layout, p.data(), v, GgufOutType::kF16, "t");
  const Gguf g = ReadGguf(path);
  EXPECT_EQ(std::get<std::string>(g.kv.at("tokenizer.ggml.model")), "gpt2");
  EXPECT_EQ(std::get<std::string>(g.kv.at("tokenizer.ggml.pre")), "gpt-2");
  EXPECT_EQ(std::get<std::vector<std::string>>(g.kv.at("tokenizer.ggml.tokens")),
            (std::vector<std::string>{"a", "b", "ab", "\xc4\xa0", "<|endoftext|>", "[PAD5]"}));
  EXPECT_EQ(std::get<std::vector<double>>(g.kv.at("tokenizer.ggml.token_type")),
            (std::vector<double>{1, 1, 1, 1, 3, 5}));
  EXPECT_EQ(std::get<std::vector<std::string>>(g.kv.at("tokenizer.ggml.merges")),
            (std::vector<std::string>{"a b"}));
  EXPECT_EQ(std::get<std::uint64_t>(g.kv.at("tokenizer.ggml.eos_token_id")), 4u);
  EXPECT_EQ(std::get<std::string>(g.kv.at("tokenizer.chat_template")), "{{ messages }}");
  EXPECT_FALSE(std::get<bool>(g.kv.at("tokenizer.ggml.add_bos_token")));
}

TEST(Gguf, RefusesWhatLlamaCppCannotRunBeforeWriting) {
  test::TempDir tmp;
  const data::VocabList v = data::ListVocab(WriteTokenizer(tmp.path() + "/tok"), 6);
  Shape bert = LlamaShape();
  bert.arch = Arch::kBert;
  EXPECT_THROW(CheckGguf(bert, v), InputError);
  const data::VocabList prefix = data::ListVocab(WriteTokenizer(tmp.path() + "/p", true), 6);
  try {
    CheckGguf(LlamaShape(), prefix);
    FAIL() << "add_prefix_space accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("add_prefix_space"), std::string::npos) << e.what();
  }
  EXPECT_THROW(data::ListVocab(tmp.path() + "/tok", 3), InputError);  // 5 tokens, V = 3
  // Llama 3's Split without ignore_merges (llama.cpp's llama-bpe ignores merges): the same ids
  // while every vocabulary token is what its merges make; refused naming "ab" when one is not.
  EXPECT_NO_THROW(
      CheckGguf(LlamaShape(), data::ListVocab(WriteTokenizer(tmp.path() + "/m", false, true), 6)));
  try {
    CheckGguf(LlamaShape(),
              data::ListVocab(WriteTokenizer(tmp.path() + "/n", false, true, false), 6));
    FAIL() << "an unmerged token accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("ignore_merges is false"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("('ab', ...)"), std::string::npos) << e.what();
  }
  // The CLI: a model.bin without a tokenizer exits 2 and writes nothing.
  const ParamLayout layout(LlamaShape());
  const std::vector<float> p = Params(layout);
  SaveCheckpoint(tmp.path() + "/model.bin", layout, p.data());
  const std::string out = tmp.path() + "/x.gguf";
  const test::CliResult r = test::RunCli(
      {"export", "--format", "gguf", "--checkpoint", tmp.path() + "/model.bin", "-o", out});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--tokenizer"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out));
  const test::CliResult ok =
      test::RunCli({"export", "--format", "gguf", "--checkpoint", tmp.path() + "/model.bin",
                    "--tokenizer", tmp.path() + "/tok", "--outtype", "bf16", "-o", out});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_EQ(ReadGguf(out).tensors.at("blk.0.attn_q.weight").type, 30u);  // BF16
}

// Gemma 3: every norm stored as 1 + w (its RMSNorms scale by 1 + w, llama.cpp's by the weight),
// the post norms under llama.cpp's names, q/k rows not permuted (llama.cpp's gemma3 rotates
// Hugging Face's halves), the windows and the local RoPE base as keys; and what llama.cpp's
// Gemma 3 fixes refused by name: another query_pre_attn_scalar, another window pattern; Qwen3's
// attention biases (llama.cpp's qwen3 has no o_proj bias).
TEST(Gguf, GemmaNormsPlusOneAndWhatLlamaCppFixesIsRefused) {
  test::TempDir tmp;
  Shape s(64, 6, Shape::PadVocab(6), 6, 4, 64);
  s.arch = Arch::kGemma3;
  s.NKV = 1, s.F = 64, s.HD = 32;
  s.attn_bias = s.mlp_bias = false;
  s.attn_scalar = 32, s.rope_local_theta = 10000, s.window = 8, s.global_every = 6;
  s.pad_token = 0;
  const ParamLayout layout(s);
  std::vector<float> p = Params(layout);
  for (float& x : p) x += 0.25f;  // Gemma's norms start at 0: values that differ from it
  const data::VocabList v = data::ListVocab(WriteTokenizer(tmp.path() + "/tok"), 6);
  const std::string path = tmp.path() + "/g.gguf";
  ExportGguf(path, layout, p.data(), v, GgufOutType::kF32, "g");
  const Gguf g = ReadGguf(path);
  EXPECT_EQ(std::get<std::string>(g.kv.at("general.architecture")), "gemma3");
  EXPECT_EQ(std::get<std::uint64_t>(g.kv.at("gemma3.attention.sliding_window")), 8u);
  EXPECT_EQ(std::get<double>(g.kv.at("gemma3.rope.freq_base_swa")), 10000.0);
  EXPECT_EQ(std::get<std::uint64_t>(g.kv.at("gemma3.attention.key_length")), 32u);
  for (auto [name, t, n] : {std::tuple{"blk.2.attn_norm.weight", kLn1w, 64},
                            std::tuple{"blk.2.attn_q_norm.weight", kQNormw, 32},
                            std::tuple{"blk.2.post_attention_norm.weight", kLnPostAttnw, 64},
                            std::tuple{"blk.2.ffn_norm.weight", kLn2w, 64},
                            std::tuple{"blk.2.post_ffw_norm.weight", kLnPostMlpw, 64}}) {
    const auto* w = reinterpret_cast<const float*>(g.Data(name));
    const float* ours = p.data() + layout.offset(t, 2);
    for (int i = 0; i < n; ++i) ASSERT_EQ(w[i], ours[i] + 1.0f) << name << " " << i;
  }
  EXPECT_EQ(
      std::memcmp(g.Data("blk.0.attn_q.weight"), p.data() + layout.offset(kQkvw, 0), 128 * 64 * 4),
      0);
  EXPECT_EQ(g.tensors.count("output.weight"), 0u);  // tied
  auto refused = [&](const Shape& bad, const char* what) {
    try {
      CheckGguf(bad, v);
      ADD_FAILURE() << what << " accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  Shape scalar = s;
  scalar.attn_scalar = 24;
  refused(scalar, "query_pre_attn_scalar 24");
  Shape pattern = s;
  pattern.global_every = 2;  // layer 1 global: llama.cpp's Gemma 3 windows it
  refused(pattern, "layer 1 is global");
  Shape qwen3 = LlamaShape();
  qwen3.arch = Arch::kQwen3;
  qwen3.attn_bias = true;
  refused(qwen3, "attention_bias");
}

}  // namespace
}  // namespace cputrain::model
