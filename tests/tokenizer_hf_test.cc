// Hugging Face tokenizer.json tokenizers against the `tokenizers` library (PyPI, run in the
// peers' Python environment by tests/data/make_hf_tokenizers.py, which also makes the
// tokenizer.json files: small BPE models trained here, set up as Llama 3, Qwen2, SmolLM2,
// GPT-2, Llama 2 and Mistral ship theirs): ids for id on the multilingual documents of
// tokenizer_docs.h plus special tokens inside text, with and without add_special_tokens, and
// Decode; GPT-2's vocabulary as tokenizer.json against the gpt2 tokenizer; the chunk cuts
// prepare-data relies on; the errors for malformed or unsupported files; the tokenize command;
// prepare-data and train with a vocabulary above 65,536 ids.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/subprocess.h"
#include "data/hf_tokenizer.h"
#include "data/token_file.h"
#include "data/tokenizer.h"
#include "model/hf.h"
#include "model/params.h"
#include "runtime/worker_pool.h"
#include "test_util.h"
#include "tokenizer_docs.h"

namespace cputrain::data {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ::cputrain::test::Escaped;
using ::cputrain::test::Slurp;
using ::cputrain::test::Tokenize;

const std::string kSourceDir = CPUTRAIN_SOURCE_DIR;
const std::string kPeersPython = CPUTRAIN_PEERS_PYTHON;

// Special tokens of the test tokenizers written inside text, and text around them.
std::vector<std::string> SpecialTokenDocuments() {
  return {
      "hello<|eot_id|>world",
      "<|begin_of_text|>Hi there<|end_of_text|>",
      "<|begin_of_text|><|begin_of_text|>",
      " <|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
      "<|endoftext|>a document<|endoftext|>",
      "<s> text </s>",
      "<s>text</s>",
      "a<unk>b <0x41> <0x0A>",
      "<|im_end",
      "<|eot_id|>",
      "a <mask> b  <mask>\t<mask>c <|r|>  d<|r|>\u3000e <|r|>",
      "<mask><mask> <|r|><|r|> \u00a0<mask>",
  };
}

// More of what the issue names: accents, CRLF, trailing whitespace, long digit runs,
// contractions in odd cases, a long word.
std::vector<std::string> MoreDocuments() {
  return {
      "caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00c5ngstr\u00f6m Zo\u00eb",
      "x\r\ny\r\n\r\nz",
      "trailing spaces and tabs  \t ",
      "12345678901234567890 3.14159265358979",
      "don'T WON'T 'Ll it'S she'D 'VE",
      "it'\u017f long s",
      "pneumonoultramicroscopicsilicovolcanoconiosis antidisestablishmentarianism",
      " \u00a0 \u3000 x",
      "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e 123",
      "\U0001F469\u200D\U0001F4BB\U0001F468\u200D\U0001F469\u200D\U0001F467 ok",
      // What NFC (Qwen2's normalizer) changes: decomposed letters, Hangul jamo (L V, LV T),
      // singletons and exclusions, marks out of canonical order, a leading mark; and what it
      // keeps (compatibility characters).
      "Tie\u0302\u0301ng Vie\u0323\u0302t, cafe\u0301",
      "\u1100\u1161\u11a8 \u1112\u1161\u11ab \uac00\u11a8",
      "\u212b \u2126 \u0344 \uf900 \u0958\u0915\u093c",
      "a\u0301\u0323 a\u0323\u0301 q\u0307\u0323 \u1e0b\u0323",
      "\u0301 leading mark, e\u0301\u0301",
      "\ufb01 \u2460 \uff21\uff22\uff23",
  };
}

std::vector<std::string> AllDocuments() {
  std::vector<std::string> docs = test::ReferenceDocuments();
  for (std::string& d : SpecialTokenDocuments()) docs.push_back(std::move(d));
  for (std::string& d : MoreDocuments()) docs.push_back(std::move(d));
  return docs;
}

// The tokenizer.json files and the library's ids, made once per build tree.
struct Reference {
  std::vector<std::string> docs = AllDocuments();
  std::string dir;  // made once per build (test::RunReferenceMakerOnce)
  json ids;         // make_hf_tokenizers.py's output; null if it could not run
};

const Reference& Ref() {
  static Reference* r = [] {
    auto* ref = new Reference();
    test::MadeReference made =
        test::RunReferenceMakerOnce(kPeersPython, kSourceDir + "/tests/data/make_hf_tokenizers.py",
                                    {kSourceDir + "/third_party/gpt2"}, ref->docs);
    ref->dir = made.dir;
    ref->ids = std::move(made.out);
    return ref;
  }();
  return *r;
}

std::string Dir(const std::string& name) { return Ref().dir + "/" + name; }

std::vector<int> Encode(const Tokenizer& t, std::string_view text, bool special = false) {
  std::vector<int> ids;
  if (special) {
    t.EncodeWithSpecial(text, &ids);
  } else {
    t.Encode(text, &ids);
  }
  return ids;
}

// The first few documents whose ids differ, with the ids around the first difference.
std::string Differences(const std::vector<std::string>& docs,
                        const std::vector<std::vector<int>>& got, const json& expected) {
  std::string report;
  int shown = 0, total = 0;
  for (std::size_t d = 0; d < docs.size(); ++d) {
    const auto want = expected[d].get<std::vector<int>>();
    if (got[d] == want) continue;
    if (++total > 5) continue;
    std::size_t i = 0;
    while (i < got[d].size() && i < want.size() && got[d][i] == want[i]) ++i;
    auto around = [&](const std::vector<int>& v) {
      std::string s;
      for (std::size_t k = i >= 3 ? i - 3 : 0; k < std::min(v.size(), i + 4); ++k)
        s += fmt::format("{} ", v[k]);
      return s;
    };
    report += fmt::format(
        "document {} \"{}\": first difference at token {}\n  C++:       {}\n"
        "  reference: {}\n",
        d, Escaped(docs[d]).substr(0, 200), i, around(got[d]), around(want));
    ++shown;
  }
  return total == 0 ? ""
                    : fmt::format("{} of {} documents differ:\n{}", total, docs.size(), report);
}

class HfTokenizerMatches : public ::testing::TestWithParam<std::string> {};

TEST_P(HfTokenizerMatches, TheTokenizersLibraryIdForId) {
  const Reference& ref = Ref();
  ASSERT_FALSE(ref.ids.is_null());
  const json& want = ref.ids["tokenizers"][GetParam()];
  ASSERT_TRUE(want.is_object()) << GetParam();
  std::unique_ptr<Tokenizer> tok = MakeTokenizer(Dir(GetParam()));
  std::vector<std::vector<int>> plain, special;
  std::size_t tokens = 0;
  int decoded_differ = 0;
  for (std::size_t d = 0; d < ref.docs.size(); ++d) {
    plain.push_back(Encode(*tok, ref.docs[d]));
    special.push_back(Encode(*tok, ref.docs[d], true));
    tokens += plain.back().size();
    for (int id : plain.back()) ASSERT_TRUE(id >= 0 && id < tok->vocab_size());
    const std::string decoded = tok->Decode(plain.back().data(), plain.back().size());
    if (decoded != want["decoded"][d].get<std::string>() && ++decoded_differ <= 3) {
      ADD_FAILURE() << "Decode of document " << d << " \"" << Escaped(ref.docs[d]) << "\": C++ \""
                    << Escaped(decoded) << "\", reference \""
                    << Escaped(want["decoded"][d].get<std::string>()) << "\"";
    }
  }
  // Decoding token by token, as generate prints them: the first with Decode, the rest as
  // continuations, gives Decode of the whole.
  int streamed_differ = 0;
  for (std::size_t d = 0; d < ref.docs.size(); ++d) {
    const std::vector<int>& ids = plain[d];
    if (ids.empty()) continue;
    std::string text = tok->Decode(ids.data(), 1);
    for (std::size_t i = 1; i < ids.size(); ++i) text += tok->DecodeContinuation(&ids[i], 1);
    if (text != tok->Decode(ids.data(), ids.size()) && ++streamed_differ <= 3) {
      ADD_FAILURE() << "token-by-token Decode of document " << d << ": \"" << Escaped(text) << "\"";
    }
  }
  EXPECT_EQ(streamed_differ, 0);
  EXPECT_EQ(Differences(ref.docs, plain, want["plain"]), "") << "Encode";
  EXPECT_EQ(Differences(ref.docs, special, want["special"]), "") << "EncodeWithSpecial";
  EXPECT_EQ(decoded_differ, 0);
  EXPECT_GT(tokens, 5000u);  // the comparison covered a corpus
}

INSTANTIATE_TEST_SUITE_P(Pipelines, HfTokenizerMatches,
                         ::testing::Values("llama3", "qwen2", "smollm2", "big", "gpt2",
                                           "gpt2_prefix", "llama2", "llama2_eos", "llama2_cross",
                                           "metaspace", "metaspace_split", "qwen3", "gemma3",
                                           "phi3"));

// GPT-2's vocabulary read as a tokenizer.json encodes as the gpt2 tokenizer (itself checked
// against tiktoken), except that <|endoftext|> written in the text is the special token there.
TEST(HfTokenizer, Gpt2AsTokenizerJsonEqualsTheGpt2Tokenizer) {
  std::unique_ptr<Tokenizer> hf = MakeTokenizer(Dir("gpt2"));
  std::unique_ptr<Tokenizer> gpt2 = MakeTokenizer("gpt2");
  EXPECT_EQ(hf->vocab_size(), 50257);
  EXPECT_EQ(hf->eot_token(), 50256);  // GPT2TokenizerFast's default eos
  int compared = 0;
  for (const std::string& d : Ref().docs) {
    if (d.find("<|endoftext|>") != std::string::npos) continue;
    ASSERT_EQ(Encode(*hf, d), Encode(*gpt2, d)) << Escaped(d);
    ++compared;
  }
  EXPECT_GT(compared, 700);
  EXPECT_EQ(Encode(*hf, "a<|endoftext|>b"), (std::vector<int>{64, 50256, 65}));
  // Its documents in prepare-data are framed as gpt2's: <|endoftext|> before each.
  EXPECT_TRUE(hf->special_frame().before.empty() && hf->special_frame().after.empty());
}

TEST(HfTokenizer, BosAndEosComeFromTheConfigElseTheTemplate) {
  // The id of a special token: Encode matches it in the text.
  auto ids = [](const std::string& name, const std::string& token) {
    std::vector<int> v;
    MakeTokenizer(Dir(name))->Encode(token, &v);
    return v.size() == 1 ? v[0] : -2;
  };
  ASSERT_FALSE(Ref().ids.is_null());
  // Llama 3: the template's <|begin_of_text|> is bos; no eos.
  std::unique_ptr<Tokenizer> llama3 = MakeTokenizer(Dir("llama3"));
  EXPECT_EQ(llama3->bos_token(), ids("llama3", "<|begin_of_text|>"));
  EXPECT_EQ(llama3->eos_token(), -1);
  EXPECT_EQ(llama3->special_frame().before, (std::vector<int>{llama3->bos_token()}));
  // SmolLM2: tokenizer_config.json names <|endoftext|> for both, and adds neither.
  std::unique_ptr<Tokenizer> smol = MakeTokenizer(Dir("smollm2"));
  EXPECT_EQ(smol->bos_token(), ids("smollm2", "<|endoftext|>"));
  EXPECT_EQ(smol->eos_token(), smol->bos_token());
  EXPECT_EQ(smol->eot_token(), smol->eos_token());
  EXPECT_TRUE(smol->special_frame().before.empty());
  // Llama 2 with add_bos_token and add_eos_token: <s> text </s>.
  std::unique_ptr<Tokenizer> llama2 = MakeTokenizer(Dir("llama2_eos"));
  EXPECT_EQ(llama2->bos_token(), ids("llama2", "<s>"));
  EXPECT_EQ(llama2->eos_token(), ids("llama2", "</s>"));
  EXPECT_EQ(llama2->special_frame().after, (std::vector<int>{llama2->eos_token()}));
  // A tokenizer.json path works as its directory does.
  EXPECT_EQ(MakeTokenizer(Dir("big/tokenizer.json"))->bos_token(),
            MakeTokenizer(Dir("big"))->bos_token());
  EXPECT_GT(MakeTokenizer(Dir("big"))->vocab_size(), 70000);
}

// Where IsSafeCut says a document may be cut, encoding the two parts gives the whole's ids (the
// property prepare-data's parallel chunks rely on); SentencePiece-style pipelines never cut.
TEST(HfTokenizer, SafeCutsSplitNothing) {
  ASSERT_FALSE(Ref().ids.is_null());
  std::vector<std::string> docs = test::EdgeCases();
  for (std::string& d : test::RandomDocuments(200, 11)) docs.push_back(std::move(d));
  docs.push_back(Slurp(kSourceDir + "/tests/data/tokenizer_corpus.txt"));
  for (const char* name : {"llama3", "qwen2", "smollm2", "gpt2"}) {
    std::unique_ptr<Tokenizer> tok = MakeTokenizer(Dir(name));
    int cuts = 0;
    for (const std::string& d : docs) {
      const std::vector<int> whole = Encode(*tok, d);
      for (std::size_t pos = 1; pos < d.size(); ++pos) {
        if (!tok->IsSafeCut(d, pos)) continue;
        ++cuts;
        std::vector<int> parts = Encode(*tok, std::string_view(d).substr(0, pos));
        tok->Encode(std::string_view(d).substr(pos), &parts);
        ASSERT_EQ(parts, whole) << name << ": cut at " << pos << " of \"" << Escaped(d) << "\"";
      }
    }
    EXPECT_GT(cuts, 500) << name;
  }
  for (const char* name : {"llama2", "metaspace", "gpt2_prefix"}) {
    std::unique_ptr<Tokenizer> tok = MakeTokenizer(Dir(name));
    EXPECT_FALSE(tok->IsSafeCut("hello world", 5)) << name;
  }
}

TEST(HfTokenizer, RoundTripsTextAndInvalidUtf8) {
  ASSERT_FALSE(Ref().ids.is_null());
  for (const char* name : {"llama3", "qwen2", "big", "llama2"}) {
    std::unique_ptr<Tokenizer> tok = MakeTokenizer(Dir(name));
    for (const std::string& d : {std::string("plain text, 123"), std::string("\xff\xfe bad \xc3"),
                                 std::string("\xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80")}) {
      const std::vector<int> ids = Encode(*tok, d);
      EXPECT_EQ(tok->Decode(ids.data(), ids.size()), d) << name << " " << Escaped(d);
    }
    const int bad = tok->vocab_size();
    EXPECT_THROW(tok->Decode(&bad, 1), InputError);
  }
}

// Vocabularies of millions: ids above 2^21 through merges, added tokens and Decode. Made here
// (no library needed): fillers first, GPT-2's byte alphabet and two merges at the top.
TEST(HfTokenizer, AVocabularyOfMillionsOfIds) {
  constexpr int kVocab = 2'100'000;
  test::TempDir dir;
  std::string vocab = "{";
  const int bytes_at = kVocab - 259;  // 256 byte tokens, "ab", "Ġab", "<|eot|>"
  for (int i = 0; i < bytes_at; ++i) vocab += fmt::format("\"<f{}>\":{},", i, i);
  // GPT-2's byte alphabet (printable bytes stand for themselves, the rest for U+0100..).
  for (int b = 0, extra = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const char32_t cp = printable ? char32_t(b) : char32_t(256 + extra++);
    std::string utf8;
    if (cp < 0x80) {
      utf8.push_back(static_cast<char>(cp));
    } else {
      utf8.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      utf8.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    vocab += fmt::format("{}:{},", json(utf8).dump(), bytes_at + b);
  }
  vocab +=
      fmt::format("\"ab\":{},\"\u0120ab\":{},\"<|eot|>\":{}}}", kVocab - 3, kVocab - 2, kVocab - 1);
  std::ofstream(dir.path() + "/tokenizer.json")
      << R"({"added_tokens":[{"id":)" << kVocab - 1
      << R"(,"content":"<|eot|>","special":true}],"normalizer":null,)"
      << R"("pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"use_regex":true},)"
      << R"("post_processor":null,"decoder":{"type":"ByteLevel"},)"
      << R"("model":{"type":"BPE","merges":["a b","\u0120 ab"],"vocab":)" << vocab << "}}";
  std::unique_ptr<Tokenizer> tok = MakeTokenizer(dir.path());
  EXPECT_EQ(tok->vocab_size(), kVocab);
  EXPECT_EQ(Encode(*tok, "ab ab<|eot|>a"),
            (std::vector<int>{kVocab - 3, kVocab - 2, kVocab - 1, bytes_at + 'a'}));
  const std::vector<int> ids = Encode(*tok, "ab ab<|eot|>a");
  EXPECT_EQ(tok->Decode(ids.data(), ids.size()), "ab ab<|eot|>a");
  EXPECT_EQ(tok->eot_token(), -1);
}

// ---- Errors: a malformed or unsupported tokenizer.json is an InputError naming the file and
// the key, with a hint.

// Writes llama2's tokenizer.json changed by `edit` into a fresh directory; returns the error
// loading it throws.
InputError LoadError(test::TempDir& dir, const std::function<void(json&)>& edit) {
  json j = json::parse(Slurp(Dir("llama2/tokenizer.json")));
  edit(j);
  std::ofstream(dir.path() + "/tokenizer.json") << j.dump();
  try {
    MakeTokenizer(dir.path());
  } catch (const InputError& e) {
    return e;
  }
  ADD_FAILURE() << "no InputError";
  return InputError("");
}

void ExpectError(const InputError& e, const std::string& file, const std::string& part) {
  EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  EXPECT_FALSE(e.hint().empty()) << e.what();
}

TEST(HfTokenizerErrors, NameTheFileTheKeyAndAFix) {
  ASSERT_FALSE(Ref().ids.is_null());
  test::TempDir dir;
  const std::string file = dir.path() + "/tokenizer.json";
  ExpectError(LoadError(dir, [](json& j) { j["model"]["type"] = "Unigram"; }), file,
              "model.type: 'Unigram' is not supported");
  // A WordPiece model goes to WordPieceTokenizer, which names Llama 2's normalizer.
  InputError wp = LoadError(dir, [](json& j) { j["model"]["type"] = "WordPiece"; });
  ExpectError(wp, file, "normalizer.type: normalizer 'Sequence' is not supported with a WordPiece");
  ExpectError(LoadError(dir,
                        [](json& j) {
                          j["normalizer"] = {{"type", "NFKC"}};
                        }),
              file, "normalizer.type: normalizer 'NFKC' is not supported");
  ExpectError(LoadError(dir,
                        [](json& j) {
                          j["pre_tokenizer"] = {{"type", "Whitespace"}};
                        }),
              file, "pre_tokenizer.type: pre-tokenizer 'Whitespace' is not supported");
  ExpectError(LoadError(dir,
                        [](json& j) {
                          j["pre_tokenizer"] = {{"type", "Split"},
                                                {"pattern", {{"Regex", "\\s+|\\w+"}}},
                                                {"behavior", "Isolated"},
                                                {"invert", false}};
                        }),
              file,
              "the pattern {\"Regex\":\"\\\\s+|\\\\w+\"} is not one cputrain-numa implements");
  ExpectError(LoadError(dir, [](json& j) { j["model"]["merges"][3] = "a b c"; }), file,
              "model.merges[3]: 'a b c' is not two tokens separated by one space");
  ExpectError(LoadError(dir, [](json& j) { j["model"]["merges"][0] = "zzz qqq"; }), file,
              "model.merges[0]: 'zzz' + 'qqq': the first part is not in model.vocab");
  ExpectError(LoadError(dir, [](json& j) { j["model"].erase("vocab"); }), file,
              "model.vocab: is missing");
  ExpectError(LoadError(dir, [](json& j) { j["model"]["vocab"]["<s>"] = 99999999; }), file,
              "model.vocab: the id of '<s>' is not an integer in [0, ");
  ExpectError(LoadError(dir,
                        [](json& j) {
                          j["decoder"] = {{"type", "CTC"}};
                        }),
              file, "decoder.type: decoder 'CTC' is not supported");
  ExpectError(LoadError(dir, [](json& j) { j["model"]["dropout"] = 0.1; }), file, "model.dropout");
  // Not JSON at all.
  std::ofstream(file) << "{\"model\": ";
  try {
    MakeTokenizer(file);
    ADD_FAILURE() << "no error for a truncated tokenizer.json";
  } catch (const InputError& e) {
    ExpectError(e, file, "is not valid JSON");
  }
  // A tokenizer_config.json naming a token the vocabulary lacks.
  fs::copy_file(Dir("llama2/tokenizer.json"), file, fs::copy_options::overwrite_existing);
  std::ofstream(dir.path() + "/tokenizer_config.json") << R"({"eos_token": "<|nope|>"})";
  try {
    MakeTokenizer(dir.path());
    ADD_FAILURE() << "no error for an unknown eos_token";
  } catch (const InputError& e) {
    ExpectError(e, dir.path() + "/tokenizer_config.json", "eos_token: '<|nope|>' is not a token");
  }
}

// ---- The CLI: tokenize, prepare-data with a tokenizer.json, train on uint32 token files.

// "" if the texts are equal, else their first differing line (numbered from 1) in each.
std::string FirstDifferentLine(const std::string& got, const std::string& want) {
  if (got == want) return "";
  std::istringstream g(got), w(want);
  std::string a, b;
  for (int line = 1;; ++line) {
    const bool more_g = static_cast<bool>(std::getline(g, a));
    const bool more_w = static_cast<bool>(std::getline(w, b));
    if (!more_g && !more_w) return "texts differ only in their last newline";
    if (a != b || more_g != more_w) {
      return fmt::format("line {}: got '{}', want '{}'", line, more_g ? a : "(none)",
                         more_w ? b : "(none)");
    }
  }
}

// The reference's ids of the documents that are one line of the corpus (no newline inside).
TEST(CliTokenize, PrintsTheReferenceIdsLineByLine) {
  const Reference& ref = Ref();
  ASSERT_FALSE(ref.ids.is_null());
  for (const char* name : {"llama3", "llama2_eos", "big"}) {
    std::string input, plain, special;
    int lines = 0;
    for (std::size_t d = 0; d < ref.docs.size(); ++d) {
      const std::string& doc = ref.docs[d];
      if (doc.find('\n') != std::string::npos || doc.find('\r') != std::string::npos) continue;
      input += doc + "\n";
      auto join = [](const json& ids) {
        std::string s;
        for (const json& id : ids) {
          if (!s.empty()) s.push_back(' ');
          s += std::to_string(id.get<int>());
        }
        s.push_back('\n');
        return s;
      };
      plain += join(ref.ids["tokenizers"][name]["plain"][d]);
      special += join(ref.ids["tokenizers"][name]["special"][d]);
      ++lines;
    }
    ASSERT_GT(lines, 300);
    const SubprocessResult r = Tokenize({"--tokenizer", Dir(name)}, input);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(FirstDifferentLine(r.out, plain), "") << name;
    const SubprocessResult s = Tokenize({"--tokenizer", Dir(name), "--special"}, input);
    ASSERT_EQ(s.exit_code, 0) << s.err;
    EXPECT_EQ(FirstDifferentLine(s.out, special), "") << name << " --special";
  }
  // gpt2 and bytes by name; a last line without its newline; an empty line.
  SubprocessResult g = Tokenize({"--tokenizer", "gpt2"}, "Hello world\n\n the");
  ASSERT_EQ(g.exit_code, 0) << g.err;
  EXPECT_EQ(g.out, "15496 995\n\n262\n");
  SubprocessResult b = Tokenize({"--tokenizer", "bytes", "--special"}, "ab\r\n");
  EXPECT_EQ(b.out, "97 98 13\n");
}

TEST(CliTokenize, BadTokenizersExitWith2AndAHint) {
  ASSERT_FALSE(Ref().ids.is_null());
  test::TempDir dir;
  SubprocessResult missing = Tokenize({"--tokenizer", dir.path() + "/nope"}, "x\n");
  EXPECT_EQ(missing.exit_code, 2) << missing.err;
  EXPECT_NE(missing.err.find("hint:"), std::string::npos) << missing.err;
  SubprocessResult empty = Tokenize({"--tokenizer", dir.path()}, "x\n");
  EXPECT_EQ(empty.exit_code, 2) << empty.err;
  EXPECT_NE(empty.err.find("holds no tokenizer: no tokenizer.json"), std::string::npos)
      << empty.err;
  EXPECT_NE(empty.err.find("hint:"), std::string::npos) << empty.err;
  json j = json::parse(Slurp(Dir("qwen2/tokenizer.json")));
  j["model"]["type"] = "WordPiece";
  std::ofstream(dir.path() + "/tokenizer.json") << j.dump();
  SubprocessResult wp = Tokenize({"--tokenizer", dir.path()}, "x\n");
  EXPECT_EQ(wp.exit_code, 2) << wp.err;
  // Read as WordPiece (tokenizer.h), which names what Qwen2's model lacks.
  EXPECT_NE(wp.err.find(dir.path() + "/tokenizer.json': model.unk_token"), std::string::npos)
      << wp.err;
  EXPECT_NE(wp.err.find("WordPiece"), std::string::npos) << wp.err;
  EXPECT_NE(wp.err.find("hint:"), std::string::npos) << wp.err;
  SubprocessResult help = Tokenize({"--help"}, "");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("--special"), std::string::npos) << help.out;
}

std::vector<int> ReadTokens(const std::string& path) {
  TokenFile f = TokenFile::Open(path);
  std::vector<int> ids(f.size());
  f.Read(0, f.size(), ids.data());
  return ids;
}

// prepare-data with the 70,000+ token vocabulary: version 2 files, each document framed by the
// config's bos and eos (add_bos_token, add_eos_token), ids those of the library; then train
// reads version 2 files.
TEST(CliPrepareData, ATokenizerJsonAbove65536IdsWritesVersion2AndTrainReadsIt) {
  const Reference& ref = Ref();
  ASSERT_FALSE(ref.ids.is_null());
  test::TempDir dir;
  const std::string corpus = Slurp(kSourceDir + "/tests/data/tokenizer_corpus.txt");
  std::ofstream(dir.path() + "/a.txt") << corpus;
  std::ofstream(dir.path() + "/b.txt") << corpus;
  test::CliResult p =
      test::RunCli({"prepare-data", "--tokenizer", Dir("big"), "--val-fraction", "0.5", "--threads",
                    "2", "-o", dir.path() + "/data", dir.path() + "/a.txt", dir.path() + "/b.txt"});
  ASSERT_EQ(p.exit_code, 0) << p.err;
  TokenFile train = TokenFile::Open(dir.path() + "/data/train.bin");
  EXPECT_EQ(train.version(), 2);
  // The corpus is a reference document of its own: its ids, between bos and eos.
  std::size_t corpus_doc = 0;
  while (ref.docs[corpus_doc] != corpus) ++corpus_doc;
  const auto want = ref.ids["tokenizers"]["big"]["special"][corpus_doc].get<std::vector<int>>();
  ASSERT_EQ(want.front(), MakeTokenizer(Dir("big"))->bos_token());
  ASSERT_EQ(want.back(), MakeTokenizer(Dir("big"))->eos_token());
  EXPECT_EQ(ReadTokens(dir.path() + "/data/train.bin"), want);
  EXPECT_EQ(ReadTokens(dir.path() + "/data/val.bin"), want);
  EXPECT_GT(*std::max_element(want.begin(), want.end()), 65535);

  // train reads version 2 files: one of byte ids trains a bytes model; big's ids are refused
  // by that model naming the first one beyond its vocabulary, and a Llama of big's vocabulary
  // (above 65,536 ids) trains on them.
  {
    TokenFileWriter w(dir.path() + "/bytes.bin", kTokenFileVersionWide);
    std::vector<uint32_t> bytes(corpus.begin(), corpus.end());
    for (uint32_t& b : bytes) b &= 0xFF;
    w.Append(bytes.data(), bytes.size());
    w.Commit();
  }
  auto train_args = [&](const std::string& data, const std::string& out) {
    return std::vector<std::string>{"train",
                                    "--progress",
                                    "quiet",
                                    "--set",
                                    "model.vocab_size=256",
                                    "--set",
                                    "model.layers=1",
                                    "--set",
                                    "model.channels=16",
                                    "--set",
                                    "model.heads=2",
                                    "--set",
                                    "model.max_seq_len=16",
                                    "--set",
                                    "data.batch_size=2",
                                    "--set",
                                    "data.seq_len=16",
                                    "--set",
                                    "data.train=" + data,
                                    "--set",
                                    "data.val=" + data,
                                    "--set",
                                    "train.steps=2",
                                    "--set",
                                    "train.eval_every=2",
                                    "--set",
                                    "train.eval_batches=1",
                                    "--set",
                                    "train.checkpoint_every=2",
                                    "--set",
                                    "optim.warmup_steps=1",
                                    "--set",
                                    "train.out_dir=" + out};
  };
  test::CliResult t =
      test::RunCli(train_args(dir.path() + "/bytes.bin", dir.path() + "/run"), {}, 300);
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_NE(Slurp(dir.path() + "/run/metrics.jsonl").find("val_loss"), std::string::npos);
  test::CliResult big =
      test::RunCli(train_args(dir.path() + "/data/train.bin", dir.path() + "/run_big"), {}, 300);
  EXPECT_EQ(big.exit_code, 2) << big.err;
  EXPECT_NE(big.err.find(fmt::format("token 0 (0-based, byte offset 1024) is {}, not below the "
                                     "model's vocabulary size 256",
                                     want[0])),
            std::string::npos)
      << big.err;
  std::vector<std::string> wide = train_args(dir.path() + "/data/train.bin", dir.path() + "/wide");
  const int V = MakeTokenizer(Dir("big"))->vocab_size();
  ASSERT_GT(V, 65536);
  std::replace(wide.begin(), wide.end(), std::string("model.vocab_size=256"),
               "model.vocab_size=" + std::to_string(V));
  for (const char* set : {"model.arch=llama", "model.kv_heads=1"}) {
    wide.push_back("--set");
    wide.push_back(set);
  }
  test::CliResult w = test::RunCli(wide, {}, 300);
  ASSERT_EQ(w.exit_code, 0) << w.err;
  EXPECT_NE(Slurp(dir.path() + "/wide/metrics.jsonl").find("val_loss"), std::string::npos);
}

// generate on a Hugging Face Llama directory with its own tokenizer.json (Llama 3's pipeline):
// the tokenizer is found in the directory, the prompt gets its bos, greedy decoding repeats; a
// Llama without a tokenizer beside it is exit 2 naming the fix.
TEST(CliGenerate, ALlamaDirectoryUsesItsTokenizerJson) {
  test::TempDir dir;
  const std::string hf = dir.path() + "/llama";
  model::Shape s(64, MakeTokenizer(Dir("llama3"))->vocab_size(), 0, 2, 4, 32);
  s.Vp = model::Shape::PadVocab(s.V);
  s.arch = model::Arch::kLlama;
  s.NKV = 2;
  s.F = 64;
  s.attn_bias = s.mlp_bias = false;
  const model::ParamLayout layout(s);
  std::vector<float> params(layout.total());
  WorkerPool pool(std::vector<int>(1, 0), nullptr, "init");
  model::RandomInit(pool, layout, 5, params.data());
  model::ExportHf(hf, layout, params.data());
  std::vector<std::string> args = {"generate", "--checkpoint", hf,
                                   "--prompt", "Hello world",  "--temperature",
                                   "0",        "--tokens",     "8"};
  test::CliResult none = test::RunCli(args);
  EXPECT_EQ(none.exit_code, 2) << none.err;
  EXPECT_NE(none.err.find("pass --tokenizer DIR"), std::string::npos) << none.err;
  std::filesystem::copy_file(Dir("llama3") + "/tokenizer.json", hf + "/tokenizer.json");
  test::CliResult a = test::RunCli(args), b = test::RunCli(args);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out.rfind("Hello world", 0), 0u) << a.out;
  EXPECT_GT(a.out.size(), std::string("Hello world\n").size()) << a.out;
  EXPECT_EQ(a.out, b.out);
  EXPECT_NE(a.err.find("tokenizer " + hf), std::string::npos) << a.err;
}

}  // namespace
}  // namespace cputrain::data
