// Tokenizers: the C++ GPT-2 encoder against OpenAI's tiktoken (PyPI, run in the peers' Python
// environment by this test: tests/data/encode_tiktoken.py), id for id, on a varied multilingual
// corpus and on random strings of tricky characters; lossless round trips; the bytes tokenizer;
// vocab errors.
#include "data/tokenizer.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "data/gpt2_pretokenizer.h"
#include "data/gpt2_tokenizer.h"
#include "data/unicode_classes.h"
#include "test_util.h"
#include "tokenizer_docs.h"

namespace cputrain::data {
namespace {

const std::string kSourceDir = CPUTRAIN_SOURCE_DIR;
// scripts/install-deps.sh --gpt2-vocab: encoder.json, vocab.bpe and the ranks file they came from.
const std::string kEncoderDir = kSourceDir + "/third_party/gpt2";
const std::string kPeersPython = CPUTRAIN_PEERS_PYTHON;

using ::cputrain::test::EdgeCases;
using ::cputrain::test::Escaped;
using ::cputrain::test::RandomDocuments;
using ::cputrain::test::ReferenceDocuments;
using ::cputrain::test::Slurp;

const Gpt2Tokenizer& Gpt2() {
  static std::unique_ptr<Gpt2Tokenizer> t = Gpt2Tokenizer::Load(kEncoderDir);
  return *t;
}

std::vector<int> Encode(const Tokenizer& t, std::string_view text) {
  std::vector<int> ids;
  t.Encode(text, &ids);
  return ids;
}

// Runs the reference encoder (tiktoken) on `docs`. Fails (never skips) when the peers'
// environment or the ranks file is missing: CI makes both with scripts/install-deps.sh.
std::vector<std::vector<int>> ReferenceIds(const std::vector<std::string>& docs) {
  if (!std::filesystem::exists(kPeersPython)) {
    ADD_FAILURE() << kPeersPython << " is missing: the reference GPT-2 encoder (tiktoken) cannot "
                  << "run. Run scripts/install-deps.sh --peers (then reconfigure).";
    return {};
  }
  if (!std::filesystem::exists(kEncoderDir + "/gpt2.tiktoken")) {
    ADD_FAILURE() << kEncoderDir << "/gpt2.tiktoken is missing: run scripts/install-deps.sh "
                  << "--gpt2-vocab.";
    return {};
  }
  test::TempDir dir;
  std::string in = dir.path() + "/docs.json", out = dir.path() + "/ids.json";
  std::ofstream(in) << nlohmann::json(docs).dump();
  std::string cmd =
      fmt::format("'{}' '{}/tests/data/encode_tiktoken.py' '{}/gpt2.tiktoken' '{}' '{}' 2>'{}/err'",
                  kPeersPython, kSourceDir, kEncoderDir, in, out, dir.path());
  if (std::system(cmd.c_str()) != 0) {
    ADD_FAILURE() << "the reference encoder failed: " << cmd << "\n" << Slurp(dir.path() + "/err");
    return {};
  }
  nlohmann::json j = nlohmann::json::parse(Slurp(out));
  std::fprintf(stderr,
               "note: reference tiktoken %s; the C++ tables are Unicode %s (tiktoken's regex "
               "engine has its own); the corpus uses only characters both classify alike\n",
               j["tiktoken"].get<std::string>().c_str(), UnicodeClassesVersion());
  return j["ids"].get<std::vector<std::vector<int>>>();
}

TEST(Gpt2Tokenizer, MatchesReferenceEncoderIdForId) {
  std::vector<std::string> docs = ReferenceDocuments();
  std::vector<std::vector<int>> expected = ReferenceIds(docs);
  ASSERT_EQ(expected.size(), docs.size());
  int mismatches = 0;
  std::size_t tokens = 0;
  for (std::size_t d = 0; d < docs.size(); ++d) {
    std::vector<int> got = Encode(Gpt2(), docs[d]);
    tokens += got.size();
    if (got == expected[d]) continue;
    if (++mismatches > 5) continue;
    std::size_t i = 0;
    while (i < got.size() && i < expected[d].size() && got[i] == expected[d][i]) ++i;
    auto around = [&](const std::vector<int>& ids) {
      std::size_t a = i >= 3 ? i - 3 : 0, b = std::min(ids.size(), i + 4);
      std::string s;
      for (std::size_t k = a; k < b; ++k) {
        s += fmt::format("{}({}) ", ids[k], Escaped(Gpt2().Decode(&ids[k], 1)));
      }
      return s;
    };
    ADD_FAILURE() << "document " << d << " \"" << Escaped(docs[d]) << "\": first difference at "
                  << "token " << i << "\n  C++:       " << around(got)
                  << "\n  reference: " << around(expected[d]);
  }
  EXPECT_EQ(mismatches, 0) << "of " << docs.size() << " documents";
  EXPECT_GT(tokens, 5000u);  // the comparison really covered a corpus
}

TEST(Gpt2Tokenizer, KnownIds) {
  // Ids any GPT-2 tokenizer gives (tiktoken, HuggingFace, OpenAI's encoder.py).
  EXPECT_EQ(Encode(Gpt2(), "Hello world"), (std::vector<int>{15496, 995}));
  EXPECT_EQ(Encode(Gpt2(), " the"), (std::vector<int>{262}));
  // Text, not the special token.
  EXPECT_EQ(Encode(Gpt2(), "<|endoftext|>"), (std::vector<int>{27, 91, 437, 1659, 5239, 91, 29}));
  int eot = Gpt2().eot_token();
  EXPECT_EQ(eot, 50256);
  EXPECT_EQ(Gpt2().Decode(&eot, 1), "<|endoftext|>");
  EXPECT_EQ(Gpt2().vocab_size(), 50257);
  EXPECT_EQ(Gpt2().name(), "gpt2");
}

std::vector<std::string> Pieces(std::string_view text) {
  std::vector<std::string> out;
  Gpt2PreTokenizer p(text);
  std::string_view piece;
  while (p.Next(&piece)) out.emplace_back(piece);
  return out;
}

TEST(Gpt2PreTokenizer, SplitsAsTheRegexDoes) {
  using V = std::vector<std::string>;
  EXPECT_EQ(Pieces("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(Pieces("a  b"), (V{"a", " ", " b"}));          // \s+(?!\S) leaves one space
  EXPECT_EQ(Pieces("a\n\nb"), (V{"a", "\n", "\n", "b"}));  // a newline never joins a word
  EXPECT_EQ(Pieces("a \n b"), (V{"a", " \n", " b"}));
  EXPECT_EQ(Pieces("x   "), (V{"x", "   "}));  // a run at the end is one piece
  EXPECT_EQ(Pieces("we'll"), (V{"we", "'ll"}));
  EXPECT_EQ(Pieces("WE'LL"), (V{"WE", "'", "LL"}));  // contractions are case-sensitive
  EXPECT_EQ(Pieces("'sup"), (V{"'s", "up"}));
  EXPECT_EQ(Pieces("''s"), (V{"''", "s"}));
  EXPECT_EQ(Pieces(" 's"), (V{" '", "s"}));
  EXPECT_EQ(Pieces("a1b"), (V{"a", "1", "b"}));
  EXPECT_EQ(Pieces(" 123 !?"), (V{" 123", " !?"}));
  EXPECT_EQ(Pieces("\u00a0x"), (V{"\u00a0", "x"}));  // only U+0020 prefixes a word
  EXPECT_EQ(Pieces("e\u0301t\u00e9"), (V{"e", "\u0301", "t\u00e9"}));  // marks are Other
}

TEST(Gpt2PreTokenizer, InvalidUtf8BytesAreOtherAndKept) {
  using V = std::vector<std::string>;
  EXPECT_EQ(Pieces("a\xff"
                   "b"),
            (V{"a", "\xff", "b"}));
  EXPECT_EQ(Pieces(" \xc3(x"), (V{" \xc3(", "x"}));        // truncated sequence
  EXPECT_EQ(Pieces("\xed\xa0\x80"), (V{"\xed\xa0\x80"}));  // a surrogate: three Other bytes
  EXPECT_EQ(Pieces("\xc0\xaf"), (V{"\xc0\xaf"}));          // overlong '/'
}

TEST(Gpt2PreTokenizer, SafeCutsSplitNothing) {
  // For every document and every position IsGpt2SafeCut accepts, pieces(left) + pieces(right)
  // == pieces(whole): the property prepare-data's parallel chunking relies on.
  std::vector<std::string> docs = EdgeCases();
  for (std::string& d : RandomDocuments(300, 7)) docs.push_back(std::move(d));
  docs.push_back(Slurp(kSourceDir + "/tests/data/tokenizer_corpus.txt"));
  int cuts = 0;
  for (const std::string& d : docs) {
    std::vector<std::string> whole = Pieces(d);
    for (std::size_t pos = 0; pos <= d.size(); ++pos) {
      if (!IsGpt2SafeCut(d, pos)) continue;
      ++cuts;
      std::vector<std::string> parts = Pieces(std::string_view(d).substr(0, pos));
      for (std::string& p : Pieces(std::string_view(d).substr(pos))) parts.push_back(p);
      ASSERT_EQ(parts, whole) << "cut at " << pos << " of \"" << Escaped(d) << "\"";
    }
  }
  EXPECT_GT(cuts, 1000);
}

TEST(Gpt2Tokenizer, RoundTripsEveryByteString) {
  std::vector<std::string> docs = ReferenceDocuments();
  docs.push_back("invalid \xff\xfe utf-8 \xc3 truncated \xed\xa0\x80 surrogate \xf4\x90\x80\x80");
  std::string all_bytes;
  for (int b = 0; b < 256; ++b) all_bytes.push_back(static_cast<char>(b));
  docs.push_back(all_bytes);
  std::mt19937 rng(1);
  for (int i = 0; i < 200; ++i) {
    std::string d(rng() % 64, '\0');
    for (char& c : d) c = static_cast<char>(rng());
    docs.push_back(d);
  }
  for (const std::string& d : docs) {
    std::vector<int> ids = Encode(Gpt2(), d);
    for (int id : ids) ASSERT_TRUE(id >= 0 && id < 50257) << Escaped(d);
    ASSERT_EQ(Gpt2().Decode(ids.data(), ids.size()), d) << Escaped(d);
  }
}

TEST(Gpt2Tokenizer, ScanAndHeapBpeLoopsAgree) {
  // The heap loop runs only on pieces longer than kScanMaxBytes in normal use; here both run
  // on every piece up to that length of the corpus and of random text.
  std::vector<std::string> docs = ReferenceDocuments();
  std::mt19937 rng(3);
  for (int i = 0; i < 2000; ++i) {  // random short byte strings: many merge orders
    std::string d(1 + rng() % Gpt2Tokenizer::kScanMaxBytes, '\0');
    for (char& c : d) c = "aeinost ,.'\"!()0123456789\n"[rng() % 27];
    docs.push_back(d);
  }
  int compared = 0;
  for (const std::string& d : docs) {
    std::vector<std::string> pieces = Pieces(d);
    pieces.push_back(d.substr(0, std::min(d.size(), Gpt2Tokenizer::kScanMaxBytes)));
    for (const std::string& p : pieces) {
      if (p.empty() || p.size() > Gpt2Tokenizer::kScanMaxBytes) continue;
      std::vector<int> scan, heap;
      Gpt2().Bpe(p, &scan, Gpt2Tokenizer::BpeLoop::kScan);
      Gpt2().Bpe(p, &heap, Gpt2Tokenizer::BpeLoop::kHeap);
      ASSERT_EQ(scan, heap) << "\"" << Escaped(p) << "\"";
      ++compared;
    }
  }
  EXPECT_GT(compared, 5000);
}

TEST(Gpt2Tokenizer, CacheAndThreadsDoNotChangeIds) {
  std::vector<std::string> docs = ReferenceDocuments();
  std::vector<std::vector<int>> first;
  for (const std::string& d : docs) first.push_back(Encode(Gpt2(), d));
  // A second tokenizer (own cache entries) and four threads at once (one cache each).
  std::unique_ptr<Gpt2Tokenizer> other = Gpt2Tokenizer::Load(kEncoderDir);
  std::vector<int> bad(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const Tokenizer& tok = t % 2 ? static_cast<const Tokenizer&>(*other) : Gpt2();
      for (int rep = 0; rep < 3; ++rep) {
        for (std::size_t d = 0; d < docs.size(); ++d) bad[t] += Encode(tok, docs[d]) != first[d];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(bad[t], 0) << "thread " << t;
}

TEST(Gpt2Tokenizer, DecodeRejectsIdsOutsideTheVocabulary) {
  int ids[] = {15496, 50257};
  EXPECT_THROW(Gpt2().Decode(ids, 2), InputError);
  int negative = -1;
  EXPECT_THROW(Gpt2().Decode(&negative, 1), InputError);
}

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(MakeTokenizer, FindsTheInstalledVocabulary) {
  std::unique_ptr<Tokenizer> t = MakeTokenizer("gpt2");
  EXPECT_EQ(Encode(*t, "Hello world"), (std::vector<int>{15496, 995}));
}

TEST(MakeTokenizer, MissingVocabularyIsAnInputErrorWithHint) {
  test::TempDir empty;
  ScopedEnv env("CPUTRAIN_GPT2_VOCAB_DIR", empty.path());
  try {
    MakeTokenizer("gpt2");
    FAIL() << "no error for an empty vocabulary directory";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(empty.path() + "/encoder.json"), std::string::npos)
        << e.what();
    EXPECT_NE(e.hint().find("scripts/install-deps.sh"), std::string::npos) << e.hint();
  }
}

TEST(MakeTokenizer, MalformedMergesNameTheLine) {
  test::TempDir dir;
  std::filesystem::copy_file(kEncoderDir + "/encoder.json", dir.path() + "/encoder.json");
  std::ofstream(dir.path() + "/vocab.bpe") << "#version: 0.2\nĠ t\nthis line has three\n";
  ScopedEnv env("CPUTRAIN_GPT2_VOCAB_DIR", dir.path());
  try {
    MakeTokenizer("gpt2");
    FAIL() << "no error for a malformed vocab.bpe";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("vocab.bpe' line 3"), std::string::npos) << e.what();
  }
}

// A Hugging Face GPT-2 directory spells the vocabulary vocab.json (GPT2Tokenizer's
// save_vocabulary: the same mapping, keys sorted, two-space indent) and merges.txt (the same
// "#version: 0.2" header and merges in rank order). Written that way from encoder.json and
// vocab.bpe, it must encode every text exactly as they do: through Load and through
// MakeTokenizer(dir).
TEST(MakeTokenizer, HuggingFaceVocabJsonAndMergesTxtEncodeAsOpenAIsFiles) {
  test::TempDir dir;
  const nlohmann::json encoder = nlohmann::json::parse(test::Slurp(kEncoderDir + "/encoder.json"));
  std::ofstream(dir.path() + "/vocab.json") << encoder.dump(2) << "\n";
  std::ofstream(dir.path() + "/merges.txt") << test::Slurp(kEncoderDir + "/vocab.bpe");
  ASSERT_NE(test::Slurp(dir.path() + "/vocab.json"), test::Slurp(kEncoderDir + "/encoder.json"));
  std::unique_ptr<Gpt2Tokenizer> openai = Gpt2Tokenizer::Load(kEncoderDir);
  std::unique_ptr<Tokenizer> hf = MakeTokenizer(dir.path());
  EXPECT_EQ(hf->vocab_size(), 50257);
  for (const std::string text :
       {"Hello world", "  leading spaces and\ttabs\n\n",
        "caf\xc3\xa9 \xe2\x86\x92 \xe6\x97\xa5\xe6\x9c\xac",
        "I'm sure they've 1234567 <|endoftext|> x", "\xff\xfe invalid utf-8"}) {
    EXPECT_EQ(Encode(*hf, text), Encode(*openai, text)) << text;
  }
}

TEST(MakeTokenizer, UnknownNameIsAnInputError) { EXPECT_THROW(MakeTokenizer("gpt4"), InputError); }

TEST(BytesTokenizer, IdsAreTheBytesAndRoundTrip) {
  std::unique_ptr<Tokenizer> t = MakeTokenizer("bytes");
  EXPECT_EQ(t->name(), "bytes");
  EXPECT_EQ(t->vocab_size(), 256);
  EXPECT_EQ(t->eot_token(), -1);
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  std::vector<int> ids = Encode(*t, all);
  ASSERT_EQ(ids.size(), 256u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(ids[b], b);
  EXPECT_EQ(t->Decode(ids.data(), ids.size()), all);
  for (const std::string& d : ReferenceDocuments()) {
    std::vector<int> e = Encode(*t, d);
    ASSERT_EQ(e.size(), d.size());
    ASSERT_EQ(t->Decode(e.data(), e.size()), d);
  }
  int bad = 256;
  EXPECT_THROW(t->Decode(&bad, 1), InputError);
}

TEST(UnicodeClasses, Utf8ValidationFindsTheFirstBadByte) {
  EXPECT_EQ(FindInvalidUtf8("plain ascii text that is long enough for the fast path"),
            std::string_view::npos);
  EXPECT_EQ(FindInvalidUtf8("héllo 你好 😀"), std::string_view::npos);
  EXPECT_EQ(FindInvalidUtf8("0123456789abcdef\xff"), 16u);
  EXPECT_EQ(FindInvalidUtf8("ab\xc3"), 2u);              // truncated at the end
  EXPECT_EQ(FindInvalidUtf8("ab\xe0\x80\x80"), 2u);      // overlong
  EXPECT_EQ(FindInvalidUtf8("ab\xed\xb0\x80"), 2u);      // surrogate
  EXPECT_EQ(FindInvalidUtf8("ab\xf4\x90\x80\x80"), 2u);  // above U+10FFFF
  EXPECT_EQ(FindInvalidUtf8("é\x80"), 2u);               // stray continuation
}

}  // namespace
}  // namespace cputrain::data
