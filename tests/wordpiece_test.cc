// BERT's WordPiece tokenizer against Hugging Face (transformers' BertTokenizerFast and the
// `tokenizers` library, run in the peers' Python environment by tests/data/make_wordpiece.py,
// which also makes the vocabulary and saves it cased, uncased and lower-case-keeping-accents):
// ids and offsets for id on the multilingual documents of tokenizer_docs.h plus the cases BERT's
// normalizer and pre-tokenizer treat specially, loading vocab.txt, tokenizer.json and the
// directory, with and without special tokens; Decode; the cuts prepare-data relies on; the
// errors for bad vocabularies and unsupported files; the tokenize command.
#include "data/wordpiece.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/subprocess.h"
#include "data/tokenizer.h"
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

// What BERT's normalizer and pre-tokenizer treat specially, a document each.
std::vector<std::string> BertDocuments() {
  const std::string long_word(101, 'a');
  std::string accented_100, accented_101;
  for (int i = 0; i < 100; ++i) accented_100 += "\u00e9";
  accented_101 = accented_100 + "e";
  return {
      // Accents, precomposed and combining; marks NFD reorders; a mark the library's tables do
      // not know as nonspacing (U+1AC0, newer) after one they do; the grapheme joiner.
      "caf\u00e9 na\u00efve \u00c5ngstr\u00f6m r\u00e9sum\u00e9 Zo\u00eb CAF\u00c9",
      "cafe\u0301 Tie\u0302\u0301ng Vie\u0323\u0302t a\u0301\u0323 q\u0307\u0323",
      "x\u1ac0\u0301 y\u0301\u1ac0\u0323 e\u034f\u0301 \u0301leading \u0344",
      // CJK ideographs (split one a word), kana, Hangul (NFD splits it into jamo when
      // accents are stripped), an extension B ideograph.
      "\u4e2d\u6587 \u65e5\u672c\u8a9e \ud55c\uad6d\uc5b4 "
      "\u6f22\u5b57\u304b\u306a\u4ea4\u3058\u308a",
      "abc\u4e2d\u6587def \U00020000\U0002A700x \uf900\u3400",
      // Emoji, with ZWJ sequences, skin tones and flags.
      "\U0001F469\u200D\U0001F4BB \U0001F468\u200D\U0001F469\u200D\U0001F467 \U0001F970 "
      "\U0001F44D\U0001F3FD \U0001F1EB\U0001F1F7 ok\U0001F600ok",
      // Controls and formats: dropped by clean_text, words join across them.
      std::string("a\0b c\x07"
                  "d ",
                  8) +
          "zero\u200bwidth \ufeffbom soft\u00adhyphen del\x7f" + "x nel\u0085y \ufffdrepl",
      // Whitespace of every kind.
      "tab\there\nnew\r\nline\u00a0nbsp\u3000ideo\u2028ls\u2029ps v\x0bt\x0c"
      "f \u2009thin",
      // Punctuation: every ASCII class, Unicode P*, symbols that are not punctuation.
      "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
      "a.b,c!d?e don't it's (x) [y] {z} a--b a...b",
      "\u201cquoted\u201d \u2014 dash \u00bfqu\u00e9? \u00a1hola! \u00abguill\u00bb \u2026 "
      "\u30fbmid \u3001\u3002 \u00a7 \u00b6 $5 \u20ac5 +-= ^~",
      // Longer than max_input_chars_per_word (100 characters), and exactly 100.
      long_word + " ok " + std::string(100, 'b') + " " + std::string(150, 'x') + "y",
      accented_100 + " " + accented_101,
      // Upper case that lower-cases to more (U+0130), or that NFD and lower case disagree on.
      "\u0130stanbul \u0130\u0130 \u1e9eTRASSE stra\u00dfe \u03a3\u0391\u03a3 "
      "\u039f\u0394\u039f\u03a3 "
      "\u01c5 \u01c8 \ufb01 \u216b \u2126 \u212b",
      // Digits.
      "0123456789 3.14159 1,000,000 \u0663\u0664\u0665 \u2460\u2461 \uff11\uff12",
      // Special tokens written in the text; lower case is not them.
      "[CLS] x [SEP] [MASK]y[PAD] [unk] [UNK]z [cls]",
      "",
      "   \t ",
      "\u00ad\u200b",
  };
}

std::vector<std::string> AllDocuments() {
  std::vector<std::string> docs = test::ReferenceDocuments();
  for (std::string& d : BertDocuments()) docs.push_back(std::move(d));
  return docs;
}

// The tokenizers and the libraries' ids, made once per build tree.
struct Reference {
  std::vector<std::string> docs = AllDocuments();
  std::string dir;  // made once per build (test::RunReferenceMakerOnce)
  json ref;         // make_wordpiece.py's output; null if it could not run
};

const Reference& Ref() {
  static Reference* r = [] {
    auto* ref = new Reference();
    test::MadeReference made = test::RunReferenceMakerOnce(
        kPeersPython, kSourceDir + "/tests/data/make_wordpiece.py", {}, ref->docs);
    ref->dir = made.dir;
    ref->ref = std::move(made.out);
    return ref;
  }();
  return *r;
}

std::string Dir(const std::string& name) { return Ref().dir + "/" + name; }

// The library's character offsets of `doc` in bytes.
std::vector<Offset> ByteOffsets(const std::string& doc, const json& char_offsets) {
  std::vector<uint32_t> byte_at;  // character index -> byte offset; one past the end too
  for (std::size_t i = 0; i < doc.size(); ++i) {
    if ((static_cast<unsigned char>(doc[i]) & 0xC0) != 0x80) byte_at.push_back(i);
  }
  byte_at.push_back(doc.size());
  std::vector<Offset> out;
  for (const json& o : char_offsets) {
    out.push_back({byte_at.at(o[0].get<std::size_t>()), byte_at.at(o[1].get<std::size_t>())});
  }
  return out;
}

struct Case {
  std::string reference;  // the variant make_wordpiece.py made
  std::string load;       // what is loaded, under the reference's directory
};

class WordPieceMatches : public ::testing::TestWithParam<Case> {};

TEST_P(WordPieceMatches, TheLibraryIdForIdAndOffsetForOffset) {
  const Reference& ref = Ref();
  ASSERT_FALSE(ref.ref.is_null());
  const json& want = ref.ref["tokenizers"][GetParam().reference];
  ASSERT_TRUE(want.is_object()) << GetParam().reference;
  std::unique_ptr<Tokenizer> tok = MakeTokenizer(Dir(GetParam().load));
  ASSERT_NE(dynamic_cast<const WordPieceTokenizer*>(tok.get()), nullptr) << tok->name();
  std::size_t tokens = 0, continued = 0, unknown = 0, differ = 0, offsets_differ = 0;
  for (std::size_t d = 0; d < ref.docs.size(); ++d) {
    const std::string& doc = ref.docs[d];
    std::vector<int> plain, special, with_offsets;
    std::vector<Offset> offsets;
    tok->Encode(doc, &plain);
    tok->EncodeWithSpecial(doc, &special);
    tok->EncodeWithOffsets(doc, &with_offsets, &offsets);
    ASSERT_EQ(with_offsets, plain) << Escaped(doc);
    ASSERT_EQ(offsets.size(), plain.size());
    const auto want_ids = want["plain"][d].get<std::vector<int>>();
    if (plain != want_ids && ++differ <= 5) {
      ADD_FAILURE() << "document " << d << " \"" << Escaped(doc).substr(0, 300)
                    << "\": ids\n  C++:       " << fmt::format("{}", fmt::join(plain, " "))
                    << "\n  reference: " << fmt::format("{}", fmt::join(want_ids, " "));
    }
    EXPECT_EQ(special, want["special"][d].get<std::vector<int>>()) << Escaped(doc);
    const std::vector<Offset> want_offsets = ByteOffsets(doc, want["offsets"][d]);
    if (offsets != want_offsets && plain == want_ids && ++offsets_differ <= 5) {
      std::string report;
      for (std::size_t i = 0; i < offsets.size(); ++i) {
        if (offsets[i] == want_offsets[i]) continue;
        report += fmt::format("\n  token {} (id {}): C++ {}-{}, reference {}-{}", i, plain[i],
                              offsets[i].begin, offsets[i].end, want_offsets[i].begin,
                              want_offsets[i].end);
      }
      ADD_FAILURE() << "document " << d << " \"" << Escaped(doc).substr(0, 300) << "\": offsets"
                    << report;
    }
    EXPECT_EQ(tok->Decode(plain.data(), plain.size()), want["decoded"][d].get<std::string>())
        << Escaped(doc);
    // Token by token, as generate prints them.
    if (!plain.empty()) {
      std::string streamed = tok->Decode(plain.data(), 1);
      for (std::size_t i = 1; i < plain.size(); ++i) {
        streamed += tok->DecodeContinuation(&plain[i], 1);
      }
      EXPECT_EQ(streamed, tok->Decode(plain.data(), plain.size()));
    }
    tokens += plain.size();
    for (int id : plain) {
      ASSERT_TRUE(id >= 0 && id < tok->vocab_size());
      const std::string piece = tok->Decode(&id, 1);
      continued += piece.starts_with("##");
      unknown += id == dynamic_cast<const WordPieceTokenizer&>(*tok).unk_id();
    }
  }
  EXPECT_EQ(differ, 0u);
  EXPECT_EQ(offsets_differ, 0u);
  // The comparison covered a corpus whose words split into pieces, some of them unknown.
  EXPECT_GT(tokens, 9000u);
  EXPECT_GT(continued, 1500u);
  EXPECT_GT(unknown, 500u);
  std::fprintf(stderr, "note: %s: %zu documents, %zu tokens, %zu continuations, %zu [UNK]\n",
               GetParam().load.c_str(), ref.docs.size(), tokens, continued, unknown);
}

INSTANTIATE_TEST_SUITE_P(
    Variants, WordPieceMatches,
    ::testing::Values(Case{"uncased", "uncased"}, Case{"uncased", "uncased/vocab.txt"},
                      Case{"uncased", "uncased/tokenizer.json"}, Case{"cased", "cased"},
                      Case{"cased", "cased/vocab.txt"}, Case{"cased", "cased/tokenizer.json"},
                      Case{"lower_accents", "lower_accents"},
                      Case{"lower_accents", "lower_accents/vocab.txt"},
                      Case{"lower_accents", "lower_accents/tokenizer.json"},
                      Case{"vocab_only", "vocab_only"}, Case{"vocab_only", "vocab_only/vocab.txt"},
                      Case{"json_only", "json_only"},
                      Case{"json_only", "json_only/tokenizer.json"}),
    [](const ::testing::TestParamInfo<Case>& info) {
      std::string name = info.param.load;
      for (char& c : name) {
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      }
      return name;
    });

TEST(WordPiece, SpecialTokensAndSettings) {
  ASSERT_FALSE(Ref().ref.is_null());
  for (const char* name : {"uncased", "cased/vocab.txt", "lower_accents/tokenizer.json"}) {
    std::unique_ptr<WordPieceTokenizer> tok = WordPieceTokenizer::Load(Dir(name));
    EXPECT_EQ(tok->pad_id(), 0) << name;
    EXPECT_EQ(tok->unk_id(), 1) << name;
    EXPECT_EQ(tok->cls_id(), 2) << name;
    EXPECT_EQ(tok->sep_id(), 3) << name;
    EXPECT_EQ(tok->mask_id(), 4) << name;
    EXPECT_EQ(tok->TokenId("[MASK]"), 4);
    EXPECT_EQ(tok->TokenId("nope, not a token"), -1);
    EXPECT_EQ(tok->special_frame().before, std::vector<int>{2});
    EXPECT_EQ(tok->special_frame().after, std::vector<int>{3});
    EXPECT_EQ(tok->bos_token(), 2);
    EXPECT_EQ(tok->eos_token(), 3);
  }
  EXPECT_TRUE(WordPieceTokenizer::Load(Dir("uncased"))->lowercase());
  EXPECT_FALSE(WordPieceTokenizer::Load(Dir("cased"))->lowercase());
  EXPECT_TRUE(WordPieceTokenizer::Load(Dir("lower_accents"))->lowercase());
  EXPECT_TRUE(WordPieceTokenizer::Load(Dir("vocab_only"))->lowercase());
  EXPECT_FALSE(WordPieceTokenizer::Load(Dir("json_only"))->lowercase());
  // Bytes that are not UTF-8 are U+FFFD, which clean_text drops.
  std::unique_ptr<Tokenizer> tok = MakeTokenizer(Dir("uncased"));
  std::vector<int> bad, good;
  tok->Encode(
      "ab\xff"
      "cd \xe4\xb8",
      &bad);
  tok->Encode("abcd ", &good);
  EXPECT_EQ(bad, good);
  // Other tokenizers have no offsets.
  std::vector<int> ids;
  std::vector<Offset> offsets;
  EXPECT_THROW(MakeTokenizer("bytes")->EncodeWithOffsets("x", &ids, &offsets), InputError);
}

// Where IsSafeCut says a document may be cut, the two parts encode to the whole's ids.
TEST(WordPiece, SafeCutsSplitNothing) {
  ASSERT_FALSE(Ref().ref.is_null());
  std::unique_ptr<Tokenizer> tok = MakeTokenizer(Dir("uncased"));
  int cuts = 0;
  for (const std::string& d : Ref().docs) {
    std::vector<int> whole;
    tok->Encode(d, &whole);
    for (std::size_t pos = 1; pos < d.size(); ++pos) {
      if (!tok->IsSafeCut(d, pos)) continue;
      ++cuts;
      std::vector<int> parts;
      tok->Encode(std::string_view(d).substr(0, pos), &parts);
      tok->Encode(std::string_view(d).substr(pos), &parts);
      ASSERT_EQ(parts, whole) << "cut at " << pos << " of \"" << Escaped(d) << "\"";
    }
  }
  EXPECT_GT(cuts, 4500);
}

// ---- Errors: each names the file, what is wrong, and a fix.

InputError LoadError(const std::string& path) {
  try {
    MakeTokenizer(path);
  } catch (const InputError& e) {
    return e;
  }
  ADD_FAILURE() << "no InputError for " << path;
  return InputError("");
}

void ExpectError(const InputError& e, const std::string& file, const std::string& part) {
  EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  EXPECT_FALSE(e.hint().empty()) << e.what();
}

TEST(WordPieceErrors, NameTheFileTheFaultAndAFix) {
  ASSERT_FALSE(Ref().ref.is_null());
  test::TempDir dir;
  const std::string vocab = dir.path() + "/vocab.txt";
  std::ofstream(vocab) << "";
  ExpectError(LoadError(vocab), vocab, "is empty: no tokens");
  std::ofstream(vocab) << "[PAD]\n[CLS]\n[SEP]\nhello\n";
  ExpectError(LoadError(vocab), vocab, "the unknown token '[UNK]' is not in the vocabulary");
  ExpectError(LoadError(dir.path()), vocab, "the unknown token '[UNK]'");
  std::ofstream(vocab) << "[UNK]\nhello\n##lo\nhello\n";
  ExpectError(LoadError(vocab), vocab, "line 4: the token 'hello' is also on line 2");
  // A config naming another unk token, which the vocabulary lacks.
  std::ofstream(vocab) << "[UNK]\nhello\n";
  std::ofstream(dir.path() + "/tokenizer_config.json") << R"({"unk_token": "<unk>"})";
  ExpectError(LoadError(vocab), vocab, "the unknown token '<unk>'");
  fs::remove(dir.path() + "/tokenizer_config.json");
  EXPECT_EQ(MakeTokenizer(vocab)->vocab_size(), 2);

  // tokenizer.json: what WordPieceTokenizer does not implement, or a broken model.
  const std::string file = dir.path() + "/tokenizer.json";
  auto json_error = [&](const std::function<void(json&)>& edit) {
    json j = json::parse(Slurp(Dir("json_only/tokenizer.json")));
    edit(j);
    std::ofstream(file) << j.dump();
    return LoadError(file);
  };
  ExpectError(json_error([](json& j) {
                j["normalizer"] = {{"type", "NFKC"}};
              }),
              file, "normalizer.type: normalizer 'NFKC' is not supported with a WordPiece model");
  ExpectError(json_error([](json& j) {
                j["pre_tokenizer"] = {{"type", "Whitespace"}};
              }),
              file, "pre_tokenizer.type: pre-tokenizer 'Whitespace' is not supported");
  ExpectError(json_error([](json& j) { j["model"]["unk_token"] = "<nope>"; }), file,
              "model.unk_token: '<nope>' is not in model.vocab");
  ExpectError(json_error([](json& j) { j["model"]["vocab"] = json::object(); }), file,
              "model.vocab: is empty");
  ExpectError(json_error([](json& j) { j["added_tokens"][0]["lstrip"] = true; }), file,
              "added_tokens[0].lstrip: is true");
  ExpectError(json_error([](json& j) {
                j["decoder"] = {{"type", "ByteLevel"}};
              }),
              file, "decoder.type: decoder 'ByteLevel' is not supported");
  // The command line: exit 2 with the message and a hint.
  std::ofstream(vocab) << "hello\n";
  fs::remove(file);
  const test::CliResult r = test::RunCli({"tokenize", "--tokenizer", dir.path()});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("the unknown token '[UNK]'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("hint:"), std::string::npos) << r.err;
}

// ---- The tokenize command on a directory.

TEST(WordPieceCli, TokenizePrintsTheReferenceIdsAndOffsets) {
  const Reference& ref = Ref();
  ASSERT_FALSE(ref.ref.is_null());
  const json& want = ref.ref["tokenizers"]["uncased"];
  std::string input, plain, special, offsets;
  int lines = 0;
  for (std::size_t d = 0; d < ref.docs.size(); ++d) {
    const std::string& doc = ref.docs[d];
    if (doc.find_first_of("\r\n") != std::string::npos) continue;
    input += doc + "\n";
    const auto ids = want["plain"][d].get<std::vector<int>>();
    const auto spans = ByteOffsets(doc, want["offsets"][d]);
    std::vector<std::string> with_spans;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      with_spans.push_back(fmt::format("{}:{}-{}", ids[i], spans[i].begin, spans[i].end));
    }
    plain += fmt::format("{}\n", fmt::join(ids, " "));
    special += fmt::format("{}\n", fmt::join(want["special"][d].get<std::vector<int>>(), " "));
    offsets += fmt::format("{}\n", fmt::join(with_spans, " "));
    ++lines;
  }
  ASSERT_GT(lines, 300);
  const SubprocessResult r = Tokenize({"--tokenizer", Dir("uncased")}, input);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, plain);
  const SubprocessResult s = Tokenize({"--tokenizer", Dir("uncased"), "--special"}, input);
  ASSERT_EQ(s.exit_code, 0) << s.err;
  EXPECT_EQ(s.out, special);
  const SubprocessResult o =
      Tokenize({"--tokenizer", Dir("uncased/vocab.txt"), "--offsets"}, input);
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(o.out, offsets);
  // --special --offsets: [CLS] and [SEP] span nothing, as in Hugging Face.
  const SubprocessResult so =
      Tokenize({"--tokenizer", Dir("uncased"), "--special", "--offsets"}, "[MASK]\n");
  ASSERT_EQ(so.exit_code, 0) << so.err;
  EXPECT_EQ(so.out, "2:0-0 4:0-6 3:0-0\n");
}

}  // namespace
}  // namespace cputrain::data
