#include "data/hf_tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <tuple>
#include <unordered_map>

#include "common/error.h"
#include "common/files.h"
#include "data/added_tokens.h"
#include "data/bpe_heap.h"
#include "data/gpt2_pretokenizer.h"
#include "data/gpt2_tokenizer.h"
#include "data/hf_pretokenizer.h"
#include "data/json_file.h"
#include "data/nfc.h"
#include "data/unicode_classes.h"
#include "data/word_cache.h"

namespace cputrain::data {
namespace {

constexpr char kHint[] =
    "use the tokenizer.json the model ships (Hugging Face's `tokenizers` library writes it); "
    "docs/data.md lists the pipelines cputrain-numa reads";

// (left, right) -> (rank, merged) for ids of any size: open addressing over 64-bit keys.
class PairTable {
 public:
  void Reserve(std::size_t n) {
    std::size_t capacity = 16;
    while (capacity < 2 * n + 1) capacity *= 2;
    slots_.assign(capacity, Slot{kEmpty, 0, 0});
    shift_ = 64 - std::countr_zero(capacity);
  }
  // Sets the pair's merge (a later one replaces an earlier one, as HF's map does).
  void Put(int left, int right, int rank, int merged) {
    const uint64_t key = Key(left, right);
    std::size_t i = Index(key);
    while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & (slots_.size() - 1);
    slots_[i] = Slot{key, rank, merged};
  }
  BpeMerge Find(int left, int right) const {
    const uint64_t key = Key(left, right);
    for (std::size_t i = Index(key);; i = (i + 1) & (slots_.size() - 1)) {
      const Slot& s = slots_[i];
      if (s.key == key) return {s.rank, s.merged};
      if (s.key == kEmpty) return {-1, -1};
    }
  }

 private:
  struct Slot {
    uint64_t key;
    int32_t rank, merged;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static uint64_t Key(int left, int right) {
    return (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
  }
  std::size_t Index(uint64_t key) const {
    return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_);
  }
  std::vector<Slot> slots_;
  int shift_ = 60;
};

struct NormStep {
  enum Kind { kPrepend, kReplace, kNfc } kind;
  std::string from, to;  // Replace: from -> to; Prepend: to
};

struct PreStep {
  enum Kind { kByteLevel, kSplit, kDigits, kMetaspace } kind;
  bool add_prefix_space = false;  // ByteLevel
  bool use_regex = false;         // ByteLevel: GPT-2's pattern
  SplitPattern pattern = SplitPattern::kLlama3;
  bool individual_digits = false;
  std::string replacement;  // Metaspace
  enum Prepend { kAlways, kFirst, kNever } prepend = kAlways;
  bool split = true;
};

struct DecStep {
  enum Kind { kByteLevel, kReplace, kByteFallback, kFuse, kStrip, kMetaspace } kind;
  std::string from, to;      // Replace; Metaspace: from = the replacement
  std::string content;       // Strip: the character stripped
  int start = 0, stop = 0;   // Strip
  bool strip_first = false;  // Metaspace: the first token's replacement characters go
};

struct Added {
  std::string content;
  int id;
  bool lstrip, rstrip;
  bool special;  // skipped by decode(skip_special_tokens=True); ListVocab's kinds
};

// A piece of text on its way through the pre-tokenizers; `first` if it starts the text.
struct Piece {
  std::string_view text;
  bool first;
};

bool IsSpaceAt(std::string_view s, std::size_t i, int* len) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  char32_t cp;
  *len = DecodeUtf8(p + i, p + s.size(), &cp);
  return ClassOf(cp) == CodePointClass::kSpace;
}

void ReplaceAll(std::string* s, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  std::string out;
  std::size_t pos = 0;
  while (true) {
    std::size_t at = s->find(from, pos);
    if (at == std::string::npos) break;
    out.append(*s, pos, at - pos);
    out.append(to);
    pos = at + from.size();
  }
  if (pos == 0) return;
  out.append(*s, pos, std::string::npos);
  *s = std::move(out);
}

// "<0x0A>" -> 10; -1 if `token` is not a byte-fallback token.
int FallbackByte(std::string_view token) {
  if (token.size() != 6 || !token.starts_with("<0x") || token[5] != '>') return -1;
  int value = 0;
  for (char c : token.substr(3, 2)) {
    value *= 16;
    if (c >= '0' && c <= '9') {
      value += c - '0';
    } else if (c >= 'A' && c <= 'F') {
      value += c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      value += c - 'a' + 10;
    } else {
      return -1;
    }
  }
  return value;
}

}  // namespace

struct HfTokenizer::Impl {
  std::string path;
  uint64_t serial = 0;
  int vocab_size = 0;
  std::vector<std::string> id_to_token;  // spelled as in tokenizer.json
  std::vector<bool> known;               // id has a token
  bool byte_level = false;
  std::unordered_map<std::string, int> model_ids;  // model alphabet (raw bytes if byte-level)
  std::unordered_map<char32_t, int> char_ids;      // char-level: one-code-point tokens
  int byte_ids[256];                               // byte-level: the token of each byte, -1 if none
  int fallback_ids[256];                           // <0xNN> tokens, -1 if none
  bool byte_fallback = false, fuse_unk = false, ignore_merges = false;
  int unk = -1;
  PairTable merges;
  std::vector<VocabList::Merge> merge_list;  // in rank order, for List()
  std::vector<NormStep> norm;
  std::vector<PreStep> pre;
  std::vector<DecStep> dec;
  bool join_with_spaces = false;  // no decoder: HF joins tokens with " "
  std::vector<Added> added;
  AddedTokenIndex added_index;  // over added
  SpecialFrame frame;
  int bos = -1, eos = -1;
  bool word_space_cuts = false;
  // SentencePiece-style vocabularies: the word-start character (U+2581) that no token holds
  // after another character, so BPE merges never cross the place before it and a piece may be
  // split there (into words the cache can hold); "" if no such split is exact.
  std::string word_start;

  void EncodeSegment(std::string_view text, bool first, std::vector<int>* out) const;
  void PreTokenize(std::string_view text, bool first, std::deque<std::string>* arena,
                   std::vector<Piece>* pieces) const;
  void Model(std::string_view piece, std::vector<int>* out) const;
  void Bpe(std::string_view piece, std::vector<int>* out) const;
  int IdOf(const std::string& token) const;  // vocab or added token, -1 if none
  std::string DecodeIds(const int* ids, std::size_t n, bool continuation) const;
};

namespace {

// model.vocab and the added tokens: every id below the number of tokens, each spelled once.
void LoadVocab(const JsonFile& f, const json& root, const json& vocab, HfTokenizer::Impl* t) {
  const json& added = f.Array(root, "", "added_tokens");
  // Ids must be below the number of tokens (vocab + added): they index arrays of that size.
  const std::size_t limit = vocab.size() + added.size();
  auto set_id = [&](const std::string& key, const json& v, const std::string& token) {
    return SetTokenId(f, key, v, token, limit, &t->id_to_token, &t->known);
  };
  t->id_to_token.reserve(limit);
  for (auto it = vocab.begin(); it != vocab.end(); ++it)
    set_id("model.vocab", it.value(), it.key());
  for (std::size_t i = 0; i < added.size(); ++i) {
    const std::string where = fmt::format("added_tokens[{}]", i);
    const std::string content = f.Str(added[i], where, "content");
    const int id = set_id(where + ".id", f.At(added[i], where, "id"), content);
    if (f.Bool(added[i], where, "single_word", false)) {
      f.Fail(where + ".single_word", "single_word added tokens are not supported",
             "set \"single_word\": false");
    }
    if (content.empty()) f.Fail(where + ".content", "is empty");
    t->added.push_back({content, id, f.Bool(added[i], where, "lstrip", false),
                        f.Bool(added[i], where, "rstrip", false),
                        f.Bool(added[i], where, "special", false)});
  }
  t->vocab_size = static_cast<int>(t->id_to_token.size());
  if (t->vocab_size == 0) f.Fail("model.vocab", "is empty");
}

// The model's own alphabet: byte-level vocabularies spell bytes with ByteLevelCodePoints(); a
// character-level one has its one-code-point tokens and its <0xNN> byte-fallback tokens.
void BuildAlphabet(const json& vocab, HfTokenizer::Impl* t) {
  std::unordered_map<char32_t, int> cp_to_byte;
  if (t->byte_level) {
    const std::vector<char32_t>& cps = ByteLevelCodePoints();
    for (int b = 0; b < 256; ++b) cp_to_byte[cps[b]] = b;
  }
  std::fill(std::begin(t->byte_ids), std::end(t->byte_ids), -1);
  std::fill(std::begin(t->fallback_ids), std::end(t->fallback_ids), -1);
  t->model_ids.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const std::string& token = it.key();
    const int id = it.value().get<int>();
    const auto* p = reinterpret_cast<const unsigned char*>(token.data());
    const auto* end = p + token.size();
    if (t->byte_level) {
      std::string bytes;
      bool ok = true;
      for (char32_t cp; p < end && ok;) {
        p += DecodeUtf8(p, end, &cp);
        auto b = cp_to_byte.find(cp);
        ok = b != cp_to_byte.end();
        if (ok) bytes.push_back(static_cast<char>(b->second));
      }
      if (!ok) continue;  // not a byte-level spelling: no piece can produce it
      if (bytes.size() == 1) t->byte_ids[static_cast<unsigned char>(bytes[0])] = id;
      t->model_ids.emplace(std::move(bytes), id);
    } else {
      char32_t cp;
      if (!token.empty() && DecodeUtf8(p, end, &cp) == static_cast<int>(token.size()) &&
          cp != kInvalidCodePoint) {
        t->char_ids.emplace(cp, id);
      }
      // HF looks fallback tokens up as format!("<{:#04X}>"): "<0x" + two upper-case digits.
      if (const int b = FallbackByte(token); b >= 0 && token == fmt::format("<0x{:02X}>", b)) {
        t->fallback_ids[b] = id;
      }
      t->model_ids.emplace(token, id);
    }
  }
}

// model.merges, "a b" or ["a", "b"], each pair and its result in model.vocab; rank = position.
void LoadMerges(const JsonFile& f, const json& model, const json& vocab, HfTokenizer::Impl* t) {
  const json& merges = f.Array(model, "model", "merges");
  t->merges.Reserve(merges.size());
  t->merge_list.reserve(merges.size());
  std::string left, right;
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const json& m = merges[rank];
    const std::string key = fmt::format("model.merges[{}]", rank);
    if (m.is_string()) {
      const std::string& line = m.get_ref<const std::string&>();
      const std::size_t sp = line.find(' ');
      if (sp == std::string::npos || line.find(' ', sp + 1) != std::string::npos) {
        f.Fail(key, fmt::format("'{}' is not two tokens separated by one space", line));
      }
      left = line.substr(0, sp);
      right = line.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      f.Fail(key, "is neither \"a b\" nor [\"a\", \"b\"]");
    }
    auto l = vocab.find(left), r = vocab.find(right), merged = vocab.find(left + right);
    if (l == vocab.end() || r == vocab.end() || merged == vocab.end()) {
      f.Fail(key, fmt::format("'{}' + '{}': {} is not in model.vocab", left, right,
                              l == vocab.end()   ? "the first part"
                              : r == vocab.end() ? "the second part"
                                                 : "the merged token"));
    }
    t->merges.Put(l->get<int>(), r->get<int>(), static_cast<int>(rank), merged->get<int>());
    t->merge_list.push_back({l->get<int>(), r->get<int>(), merged->get<int>()});
  }
}

void LoadModel(const JsonFile& f, const json& root, HfTokenizer::Impl* t) {
  const json& model = f.At(root, "", "model");
  if (!model.is_object()) f.Fail("model", "is not a JSON object");
  std::string type = model.contains("type") ? f.Type(model, "model") : "BPE";
  if (type == "WordPiece") {
    f.Fail("model.type", "WordPiece (BERT's) is read by WordPieceTokenizer, not HfTokenizer",
           "load it through MakeTokenizer or WordPieceTokenizer::Load (data/wordpiece.h)");
  }
  if (type != "BPE") {
    f.Fail("model.type",
           fmt::format("'{}' is not supported: cputrain-numa reads BPE models (byte-level or "
                       "SentencePiece-style)",
                       type),
           "use a BPE tokenizer.json (GPT-2, Llama, Qwen2, Mistral, SmolLM2 families)");
  }
  if (model.contains("dropout") && !model["dropout"].is_null() &&
      !(model["dropout"].is_number() && model["dropout"].get<double>() == 0.0)) {
    f.Fail("model.dropout", "BPE dropout makes encoding random; it is not supported",
           "set \"dropout\": null");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && !model[key].is_null() &&
        !(model[key].is_string() && model[key].get<std::string>().empty())) {
      f.Fail(JsonFile::Key("model", key), "is not supported (only null)");
    }
  }
  t->byte_fallback = f.Bool(model, "model", "byte_fallback", false);
  t->fuse_unk = f.Bool(model, "model", "fuse_unk", false);
  t->ignore_merges = f.Bool(model, "model", "ignore_merges", false);

  const json& vocab = f.At(model, "model", "vocab");
  if (!vocab.is_object()) f.Fail("model.vocab", "is not an object of token -> id");
  LoadVocab(f, root, vocab, t);
  BuildAlphabet(vocab, t);
  if (const json& unk = model.value("unk_token", json()); !unk.is_null()) {
    if (!unk.is_string()) f.Fail("model.unk_token", "is not a string");
    auto it = vocab.find(unk.get<std::string>());
    if (it == vocab.end()) {
      f.Fail("model.unk_token", fmt::format("'{}' is not in model.vocab", unk.get<std::string>()));
    }
    t->unk = it->get<int>();
  }
  LoadMerges(f, model, vocab, t);
}

void LoadNormalizer(const JsonFile& f, const json& n, const std::string& where,
                    HfTokenizer::Impl* t) {
  if (n.is_null()) return;
  const std::string type = f.Type(n, where);
  if (LoadSequence(f, n, where, type, "normalizers", [&](const json& item, const std::string& key) {
        LoadNormalizer(f, item, key, t);
      })) {
    return;
  }
  if (type == "Prepend") {
    t->norm.push_back({NormStep::kPrepend, "", f.Str(n, where, "prepend")});
  } else if (type == "Replace") {
    const json& pattern = f.At(n, where, "pattern");
    if (!pattern.is_object() || !pattern.contains("String")) {
      f.Fail(where + ".pattern", "only a {\"String\": ...} pattern is supported (not a Regex)");
    }
    t->norm.push_back({NormStep::kReplace, f.Str(pattern, where + ".pattern", "String"),
                       f.Str(n, where, "content")});
  } else if (type == "NFC") {
    t->norm.push_back({NormStep::kNfc, "", ""});
  } else {
    f.Fail(where + ".type",
           fmt::format("normalizer '{}' is not supported (supported: NFC, Prepend, Replace, "
                       "Sequence)",
                       type));
  }
}

void LoadPreTokenizer(const JsonFile& f, const json& p, const std::string& where,
                      HfTokenizer::Impl* t) {
  if (p.is_null()) return;
  const std::string type = f.Type(p, where);
  PreStep step;
  if (LoadSequence(
          f, p, where, type, "pretokenizers",
          [&](const json& item, const std::string& key) { LoadPreTokenizer(f, item, key, t); })) {
    return;
  }
  if (type == "ByteLevel") {
    step.kind = PreStep::kByteLevel;
    step.add_prefix_space = f.Bool(p, where, "add_prefix_space", true);
    step.use_regex = f.Bool(p, where, "use_regex", true);
    t->byte_level = true;
  } else if (type == "Split") {
    step.kind = PreStep::kSplit;
    const json& pattern = f.At(p, where, "pattern");
    const std::string regex =
        pattern.is_object() && pattern.contains("Regex") ? f.Str(pattern, where, "Regex") : "";
    if (regex == kLlama3SplitPattern) {
      step.pattern = SplitPattern::kLlama3;
    } else if (regex == kQwen2SplitPattern) {
      step.pattern = SplitPattern::kQwen2;
    } else {
      f.Fail(where + ".pattern",
             fmt::format("the pattern {} is not one cputrain-numa implements (Llama 3's and "
                         "Qwen2's Split regexes are; each is written by hand, "
                         "src/data/hf_pretokenizer.h)",
                         pattern.dump()),
             "use a tokenizer.json with one of those patterns, or add the pattern to "
             "src/data/hf_pretokenizer.cc");
    }
    const std::string behavior = f.Str(p, where, "behavior");
    if (behavior != "Isolated" || f.Bool(p, where, "invert", false)) {
      f.Fail(where + ".behavior", fmt::format("'{}' (invert {}) is not supported: only Isolated, "
                                              "invert false",
                                              behavior, f.Bool(p, where, "invert", false)));
    }
  } else if (type == "Digits") {
    step.kind = PreStep::kDigits;
    step.individual_digits = f.Bool(p, where, "individual_digits", false);
  } else if (type == "Metaspace") {
    step.kind = PreStep::kMetaspace;
    step.replacement = f.Str(p, where, "replacement");
    step.split = f.Bool(p, where, "split", true);
    if (p.contains("prepend_scheme") && !p["prepend_scheme"].is_null()) {
      const std::string scheme = f.Str(p, where, "prepend_scheme");
      if (scheme == "always") {
        step.prepend = PreStep::kAlways;
      } else if (scheme == "first") {
        step.prepend = PreStep::kFirst;
      } else if (scheme == "never") {
        step.prepend = PreStep::kNever;
      } else {
        f.Fail(where + ".prepend_scheme",
               fmt::format("'{}' is not always, first or never", scheme));
      }
    } else {
      step.prepend =
          f.Bool(p, where, "add_prefix_space", true) ? PreStep::kAlways : PreStep::kNever;
    }
  } else {
    f.Fail(where + ".type",
           fmt::format("pre-tokenizer '{}' is not supported (supported: ByteLevel, Split with "
                       "Llama 3's or Qwen2's pattern, Digits, Metaspace, Sequence)",
                       type));
  }
  t->pre.push_back(step);
}

void LoadDecoder(const JsonFile& f, const json& d, const std::string& where, HfTokenizer::Impl* t) {
  if (d.is_null()) return;
  const std::string type = f.Type(d, where);
  DecStep step;
  if (LoadSequence(f, d, where, type, "decoders", [&](const json& item, const std::string& key) {
        LoadDecoder(f, item, key, t);
      })) {
    return;
  }
  if (type == "ByteLevel") {
    step.kind = DecStep::kByteLevel;
  } else if (type == "Replace") {
    step.kind = DecStep::kReplace;
    const json& pattern = f.At(d, where, "pattern");
    if (!pattern.is_object() || !pattern.contains("String")) {
      f.Fail(where + ".pattern", "only a {\"String\": ...} pattern is supported (not a Regex)");
    }
    step.from = f.Str(pattern, where + ".pattern", "String");
    step.to = f.Str(d, where, "content");
  } else if (type == "ByteFallback") {
    step.kind = DecStep::kByteFallback;
  } else if (type == "Fuse") {
    step.kind = DecStep::kFuse;
  } else if (type == "Strip") {
    step.kind = DecStep::kStrip;
    step.content = f.Str(d, where, "content");
    step.start = f.Int(d, where, "start", 0);
    step.stop = f.Int(d, where, "stop", 0);
  } else if (type == "Metaspace") {
    step.kind = DecStep::kMetaspace;
    step.from = f.Str(d, where, "replacement");
    if (d.contains("prepend_scheme") && !d["prepend_scheme"].is_null()) {
      step.strip_first = f.Str(d, where, "prepend_scheme") != "never";
    } else {
      step.strip_first = f.Bool(d, where, "add_prefix_space", true);
    }
  } else {
    f.Fail(where + ".type",
           fmt::format("decoder '{}' is not supported (supported: ByteLevel, Replace, "
                       "ByteFallback, Fuse, Strip, Metaspace, Sequence)",
                       type));
  }
  t->dec.push_back(step);
}

}  // namespace

int HfTokenizer::Impl::IdOf(const std::string& token) const {
  for (const Added& a : added) {
    if (a.content == token) return a.id;
  }
  for (std::size_t id = 0; id < id_to_token.size(); ++id) {
    if (known[id] && id_to_token[id] == token) return static_cast<int>(id);
  }
  return -1;
}

std::unique_ptr<HfTokenizer> HfTokenizer::Load(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool dir = fs::is_directory(path, ec);
  const fs::path file = dir ? fs::path(path) / "tokenizer.json" : fs::path(path);
  const JsonFile f(file.string(), kHint);
  const json root = f.Parse();
  if (!root.is_object()) f.Fail("(top level)", "is not a JSON object");

  auto t = std::make_unique<Impl>();
  t->path = file.string();
  t->serial = WordCache::NewSerial();
  // The pre-tokenizer first: a ByteLevel one decides the model's alphabet.
  LoadPreTokenizer(f, root.value("pre_tokenizer", json()), "pre_tokenizer", t.get());
  LoadModel(f, root, t.get());
  LoadNormalizer(f, root.value("normalizer", json()), "normalizer", t.get());
  const json decoder = root.value("decoder", json());
  t->join_with_spaces = decoder.is_null();
  LoadDecoder(f, decoder, "decoder", t.get());
  LoadPostProcessor(f, root.value("post_processor", json()), "post_processor", t->known, &t->frame);
  // Added tokens by first byte, longest first: the first that matches is the longest.
  std::vector<std::string_view> contents;
  for (const Added& a : t->added) contents.push_back(a.content);
  t->added_index.Build(contents);

  // bos/eos: the template's, unless tokenizer_config.json names them; without either, an added
  // <|endoftext|> is both (the defaults of transformers' GPT2TokenizerFast: GPT-2's own
  // tokenizer.json has no template and its config names none).
  if (t->frame.before.size() == 1) t->bos = t->frame.before[0];
  if (t->frame.after.size() == 1) t->eos = t->frame.after[0];
  for (const Added& a : t->added) {
    if (a.content != "<|endoftext|>") continue;
    if (t->bos < 0) t->bos = a.id;
    if (t->eos < 0) t->eos = a.id;
  }
  const fs::path config_path = file.parent_path() / "tokenizer_config.json";
  if (fs::exists(config_path, ec)) {
    const JsonFile cf(config_path.string(), kHint);
    const json config = cf.Parse();
    if (!config.is_object()) cf.Fail("(top level)", "is not a JSON object");
    for (auto [key, id] : {std::pair{"bos_token", &t->bos}, std::pair{"eos_token", &t->eos}}) {
      const std::string token = ConfigToken(cf, config, key);
      if (token.empty()) continue;
      *id = t->IdOf(token);
      if (*id < 0) cf.Fail(key, fmt::format("'{}' is not a token of {}", token, file.string()));
    }
    // As transformers' LlamaTokenizerFast: explicit add_bos_token / add_eos_token rebuild the
    // template around the text.
    for (auto [key, id, side] : {std::tuple{"add_bos_token", t->bos, &t->frame.before},
                                 std::tuple{"add_eos_token", t->eos, &t->frame.after}}) {
      if (!config.contains(key) || config[key].is_null()) continue;
      const bool add = cf.Bool(config, "", key, false);
      if (add && id < 0) cf.Fail(key, "is true but the tokenizer has no such token");
      *side = add ? std::vector<int>{id} : std::vector<int>{};
    }
  }

  // prepare-data may cut documents where no piece can span the cut: only when nothing adds
  // text at a piece's start (Prepend, Replace, prefix spaces, Metaspace), some step splits by a
  // pattern, and no added token holds whitespace. NFC keeps such cuts: it never joins across a
  // whitespace starter.
  bool splits = false, modifies = false;
  for (const NormStep& n : t->norm) modifies |= n.kind != NormStep::kNfc;
  for (const PreStep& s : t->pre) {
    splits |= s.kind == PreStep::kSplit || (s.kind == PreStep::kByteLevel && s.use_regex);
    modifies |=
        s.kind == PreStep::kMetaspace || (s.kind == PreStep::kByteLevel && s.add_prefix_space);
  }
  bool added_space = false;
  for (const Added& a : t->added) {
    for (char c : a.content) added_space |= c == ' ' || (c >= '\t' && c <= '\r');
  }
  t->word_space_cuts = splits && !modifies && !added_space;
  // The word-start split: the character spaces become (Replace or Metaspace), when no
  // vocabulary token holds it after a different character.
  std::string start_char;
  for (const NormStep& n : t->norm) {
    if (n.kind == NormStep::kReplace && n.from == " ") start_char = n.to;
  }
  for (const PreStep& s : t->pre) {
    if (s.kind == PreStep::kMetaspace) start_char = s.replacement;
  }
  bool exact = !start_char.empty() && !t->byte_level;
  for (auto it = t->model_ids.begin(); exact && it != t->model_ids.end(); ++it) {
    const std::string& token = it->first;
    for (std::size_t at = token.find(start_char, 1); exact && at != std::string::npos;
         at = token.find(start_char, at + 1)) {
      exact = at >= start_char.size() &&
              token.compare(at - start_char.size(), start_char.size(), start_char) == 0;
    }
  }
  if (exact) t->word_start = start_char;
  return std::unique_ptr<HfTokenizer>(new HfTokenizer(std::move(t)));
}

HfTokenizer::HfTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HfTokenizer::~HfTokenizer() = default;

std::string HfTokenizer::name() const { return impl_->path; }
int HfTokenizer::vocab_size() const { return impl_->vocab_size; }
int HfTokenizer::bos_token() const { return impl_->bos; }
int HfTokenizer::eos_token() const { return impl_->eos; }
const SpecialFrame& HfTokenizer::special_frame() const { return impl_->frame; }

bool HfTokenizer::IsSafeCut(std::string_view text, std::size_t pos) const {
  return impl_->word_space_cuts && IsWordSpaceCut(text, pos);
}

void HfTokenizer::Encode(std::string_view text, std::vector<int>* out) const {
  const Impl& t = *impl_;
  // Added tokens first, leftmost-longest; the text between them goes through the pipeline.
  std::size_t seg = 0;  // start of the text not yet encoded
  bool first = true;    // that text starts the input
  for (std::size_t i = 0; i < text.size();) {
    const int m = t.added_index.Match(text, i);
    if (m < 0) {
      ++i;
      continue;
    }
    const Added* match = &t.added[m];
    std::size_t begin = i, end = i + match->content.size();
    int len = 0;
    if (match->lstrip) {
      // Whitespace before the token is taken by it.
      while (begin > seg) {
        std::size_t b = begin - 1;
        while (b > seg && (static_cast<unsigned char>(text[b]) & 0xC0) == 0x80) --b;
        if (!IsSpaceAt(text, b, &len) || b + len != begin) break;
        begin = b;
      }
    }
    if (match->rstrip) {
      while (end < text.size() && IsSpaceAt(text, end, &len)) end += len;
    }
    if (begin > seg) t.EncodeSegment(text.substr(seg, begin - seg), first, out);
    out->push_back(match->id);
    first = false;
    seg = i = end;
  }
  if (seg < text.size()) t.EncodeSegment(text.substr(seg), first, out);
}

void HfTokenizer::Impl::EncodeSegment(std::string_view text, bool first,
                                      std::vector<int>* out) const {
  // Each step reads the text as the previous one left it; a step that changes nothing copies
  // nothing.
  std::string normalized, next;
  for (const NormStep& n : norm) {
    if (n.kind == NormStep::kPrepend) {
      if (text.empty()) continue;
      next.assign(n.to);
      next.append(text);
    } else if (n.kind == NormStep::kReplace) {
      if (text.find(n.from) == std::string_view::npos) continue;
      next.assign(text);
      ReplaceAll(&next, n.from, n.to);
    } else if (!Nfc(text, &next)) {
      continue;
    }
    normalized.swap(next);
    text = normalized;
  }
  std::deque<std::string> arena;
  std::vector<Piece> pieces;
  PreTokenize(text, first, &arena, &pieces);
  WordCache& cache = WordCache::For(serial);
  const auto bpe = [this](std::string_view p, std::vector<int>* ids) { Model(p, ids); };
  for (const Piece& p : pieces) {
    if (word_start.empty()) {
      cache.Encode(p.text, out, bpe);
      continue;
    }
    // Before each word-start character that follows another character (runs of them stay
    // together: "▁▁" tokens exist).
    std::size_t from = 0;
    for (std::size_t at = p.text.find(word_start, 1); at != std::string_view::npos;
         at = p.text.find(word_start, at + word_start.size())) {
      if (at >= word_start.size() &&
          p.text.compare(at - word_start.size(), word_start.size(), word_start) == 0) {
        continue;
      }
      cache.Encode(p.text.substr(from, at - from), out, bpe);
      from = at;
    }
    cache.Encode(p.text.substr(from), out, bpe);
  }
}

void HfTokenizer::Impl::PreTokenize(std::string_view text, bool first,
                                    std::deque<std::string>* arena,
                                    std::vector<Piece>* pieces) const {
  pieces->assign(1, Piece{text, first});
  std::vector<Piece> next;
  for (const PreStep& s : pre) {
    next.clear();
    for (Piece p : *pieces) {
      // The steps that change the text first (into the arena), then those that split it.
      if (s.kind == PreStep::kByteLevel && s.add_prefix_space && !p.text.starts_with(' ')) {
        std::string& spaced = arena->emplace_back(1, ' ');
        spaced.append(p.text);
        p.text = spaced;
      }
      if (s.kind == PreStep::kMetaspace) {
        std::string m(p.text);
        ReplaceAll(&m, " ", s.replacement);
        const bool prepend =
            s.prepend == PreStep::kAlways || (s.prepend == PreStep::kFirst && p.first);
        if (prepend && !std::string_view(m).starts_with(s.replacement)) m.insert(0, s.replacement);
        arena->push_back(std::move(m));
        p.text = arena->back();
      }
      const std::size_t before = next.size();
      std::string_view piece;
      if (s.kind == PreStep::kByteLevel && s.use_regex) {
        Gpt2PreTokenizer split(p.text);
        while (split.Next(&piece)) next.push_back({piece, false});
      } else if (s.kind == PreStep::kSplit) {
        RegexSplitter split(p.text, s.pattern);
        while (split.Next(&piece)) next.push_back({piece, false});
      } else if (s.kind == PreStep::kDigits) {
        // Runs of numbers (Rust's char::is_numeric: \p{N}) apart from the rest; each digit
        // alone with individual_digits.
        const auto* b = reinterpret_cast<const unsigned char*>(p.text.data());
        const auto* e = b + p.text.size();
        const unsigned char* start = b;
        bool in_digits = false;
        for (const unsigned char* q = b; q < e;) {
          char32_t cp;
          const int len = DecodeUtf8(q, e, &cp);
          const bool digit = ClassOf(cp) == CodePointClass::kNumber;
          if (q > start && (digit != in_digits || (digit && s.individual_digits))) {
            next.push_back(
                {std::string_view(reinterpret_cast<const char*>(start), q - start), false});
            start = q;
          }
          in_digits = digit;
          q += len;
        }
        if (e > start) {
          next.push_back(
              {std::string_view(reinterpret_cast<const char*>(start), e - start), false});
        }
      } else if (s.kind == PreStep::kMetaspace && s.split) {
        // MergedWithNext: a cut before every replacement character.
        std::size_t start = 0;
        for (std::size_t at = p.text.find(s.replacement, 1); at != std::string_view::npos;
             at = p.text.find(s.replacement, at + s.replacement.size())) {
          next.push_back({p.text.substr(start, at - start), false});
          start = at;
        }
        if (start < p.text.size()) next.push_back({p.text.substr(start), false});
      } else if (!p.text.empty()) {
        next.push_back({p.text, false});
      }
      if (next.size() > before) next[before].first = p.first;
    }
    pieces->swap(next);
  }
}

void HfTokenizer::Impl::Model(std::string_view piece, std::vector<int>* out) const {
  if (piece.empty()) return;
  if (ignore_merges) {
    auto it = model_ids.find(std::string(piece));
    if (it != model_ids.end()) {
      out->push_back(it->second);
      return;
    }
  }
  Bpe(piece, out);
}

void HfTokenizer::Impl::Bpe(std::string_view piece, std::vector<int>* out) const {
  // The initial symbols: one per byte (byte-level) or per character, a character outside the
  // vocabulary as its <0xNN> bytes (byte_fallback) or unk (consecutive ones fused with
  // fuse_unk), or dropped if there is no unk (as HF).
  std::vector<int> ids;
  ids.reserve(piece.size());
  auto unknown = [&]() {
    if (unk < 0) return;
    if (fuse_unk && !ids.empty() && ids.back() == unk) return;
    ids.push_back(unk);
  };
  const auto* p = reinterpret_cast<const unsigned char*>(piece.data());
  const auto* end = p + piece.size();
  if (byte_level) {
    for (; p < end; ++p) {
      if (byte_ids[*p] >= 0) {
        ids.push_back(byte_ids[*p]);
      } else {
        unknown();
      }
    }
  } else {
    while (p < end) {
      char32_t cp;
      const int len = DecodeUtf8(p, end, &cp);
      auto it = cp != kInvalidCodePoint ? char_ids.find(cp) : char_ids.end();
      if (it != char_ids.end()) {
        ids.push_back(it->second);
      } else if (byte_fallback &&
                 std::all_of(p, p + len, [&](unsigned char b) { return fallback_ids[b] >= 0; })) {
        for (int k = 0; k < len; ++k) ids.push_back(fallback_ids[p[k]]);
      } else {
        unknown();
      }
      p += len;
    }
  }
  BpeMergeHeap(
      ids.data(), ids.size(), [this](int left, int right) { return merges.Find(left, right); },
      out);
}

std::string HfTokenizer::Decode(const int* ids, std::size_t n) const {
  return impl_->DecodeIds(ids, n, /*continuation=*/false);
}

std::string HfTokenizer::DecodeContinuation(const int* ids, std::size_t n) const {
  return impl_->DecodeIds(ids, n, /*continuation=*/true);
}

std::string HfTokenizer::Impl::DecodeIds(const int* ids, std::size_t n, bool continuation) const {
  const Impl& t = *this;
  std::vector<std::string> tokens(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= t.vocab_size || !t.known[ids[i]]) {
      throw InputError(
          fmt::format("token id {} (position {}) is not in the vocabulary of '{}' "
                      "({} ids)",
                      ids[i], i, t.path, t.vocab_size));
    }
    tokens[i] = t.id_to_token[ids[i]];
  }
  static const std::unordered_map<char32_t, int> kCpToByte = [] {
    std::unordered_map<char32_t, int> m;
    const std::vector<char32_t>& cps = ByteLevelCodePoints();
    for (int b = 0; b < 256; ++b) m[cps[b]] = b;
    return m;
  }();
  for (const DecStep& s : t.dec) {
    switch (s.kind) {
      case DecStep::kByteLevel:
        for (std::string& token : tokens) {
          std::string bytes;
          const auto* p = reinterpret_cast<const unsigned char*>(token.data());
          const auto* end = p + token.size();
          bool ok = true;
          for (char32_t cp; p < end && ok;) {
            p += DecodeUtf8(p, end, &cp);
            auto b = kCpToByte.find(cp);
            ok = b != kCpToByte.end();
            if (ok) bytes.push_back(static_cast<char>(b->second));
          }
          if (ok) token = std::move(bytes);  // else HF keeps the token's own UTF-8
        }
        break;
      case DecStep::kReplace:
        for (std::string& token : tokens) ReplaceAll(&token, s.from, s.to);
        break;
      case DecStep::kByteFallback:
        for (std::string& token : tokens) {
          if (const int b = FallbackByte(token); b >= 0) token.assign(1, static_cast<char>(b));
        }
        break;
      case DecStep::kFuse: {
        std::string all;
        for (const std::string& token : tokens) all += token;
        tokens.assign(1, std::move(all));
        break;
      }
      case DecStep::kStrip:
        if (continuation) break;  // it trims the text's ends, not a continuation's
        for (std::string& token : tokens) {
          for (int k = 0; k < s.start && token.starts_with(s.content); ++k) {
            token.erase(0, s.content.size());
          }
          for (int k = 0; k < s.stop && token.ends_with(s.content); ++k) {
            token.resize(token.size() - s.content.size());
          }
        }
        break;
      case DecStep::kMetaspace:
        for (std::size_t i = 0; i < tokens.size(); ++i) {
          ReplaceAll(&tokens[i], s.from, i == 0 && s.strip_first && !continuation ? "" : " ");
        }
        break;
    }
  }
  std::string text;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (t.join_with_spaces && (i > 0 || continuation)) text += ' ';
    text += tokens[i];
  }
  return text;
}

namespace {

// The pre-tokenizer's arrangement as VocabList names it, and as text for messages.
VocabList::Split SplitOf(const std::vector<PreStep>& pre, std::string* text) {
  using S = VocabList::Split;
  for (const PreStep& p : pre) {
    std::string step;
    switch (p.kind) {
      case PreStep::kByteLevel:
        step = fmt::format("ByteLevel(add_prefix_space={}, use_regex={})", p.add_prefix_space,
                           p.use_regex);
        break;
      case PreStep::kSplit:
        step =
            p.pattern == SplitPattern::kLlama3 ? "Split(Llama 3's regex)" : "Split(Qwen2's regex)";
        break;
      case PreStep::kDigits:
        step = fmt::format("Digits(individual_digits={})", p.individual_digits);
        break;
      case PreStep::kMetaspace:
        step = "Metaspace";
        break;
    }
    *text += (text->empty() ? "" : " + ") + step;
  }
  auto is = [&](std::size_t i, PreStep::Kind k) { return pre[i].kind == k; };
  if (pre.size() == 1 && is(0, PreStep::kByteLevel) && pre[0].use_regex) return S::kGpt2;
  if (pre.size() == 2 && is(0, PreStep::kSplit) && is(1, PreStep::kByteLevel) &&
      !pre[1].use_regex) {
    return pre[0].pattern == SplitPattern::kLlama3 ? S::kLlama3 : S::kQwen2;
  }
  if (pre.size() == 2 && is(0, PreStep::kDigits) && pre[0].individual_digits &&
      is(1, PreStep::kByteLevel) && pre[1].use_regex) {
    return S::kDigitsGpt2;
  }
  if (pre.empty() || (pre.size() == 1 && is(0, PreStep::kMetaspace))) return S::kNone;
  return S::kOther;
}

// convert_hf_to_gguf.py's does_token_look_special: added tokens some models do not mark special.
bool LooksSpecial(std::string_view t) {
  return t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]" ||
         (t.starts_with("<|") && t.ends_with("|>")) ||
         (t.starts_with("<\uff5c") && t.ends_with("\uff5c>")) ||
         (t.starts_with("<unused") && t.ends_with(">"));
}

}  // namespace

VocabList HfTokenizer::List() const {
  const Impl& t = *impl_;
  using K = VocabList::Kind;
  VocabList v;
  v.source = t.path;
  v.model = t.byte_level ? VocabList::Model::kByteLevelBpe : VocabList::Model::kSentencePieceBpe;
  v.split = SplitOf(t.pre, &v.split_text);
  v.ignore_merges = t.ignore_merges;
  for (const NormStep& n : t.norm) {
    v.prefix_space |= n.kind == NormStep::kPrepend;
    v.nfc |= n.kind == NormStep::kNfc;
  }
  for (const PreStep& p : t.pre) {
    v.prefix_space |= (p.kind == PreStep::kMetaspace && p.prepend != PreStep::kNever) ||
                      (p.kind == PreStep::kByteLevel && p.add_prefix_space);
  }
  v.tokens = t.id_to_token;
  v.kinds.assign(v.tokens.size(), K::kNormal);
  for (std::size_t id = 0; id < v.tokens.size(); ++id) {
    if (!t.known[id]) v.kinds[id] = K::kUnused;
  }
  if (!t.byte_level) {
    for (int id : t.fallback_ids)
      if (id >= 0) v.kinds[id] = K::kByte;
  }
  for (const Added& a : t.added) {
    const bool control = a.special || (t.byte_level && LooksSpecial(a.content));
    v.kinds[a.id] = control ? K::kControl : K::kUserDefined;
  }
  v.merges = t.merge_list;
  std::vector<int> ids;
  for (const auto& [piece, id] : t.model_ids) {
    if (v.kinds[id] == K::kControl || v.kinds[id] == K::kUserDefined) continue;  // matched first
    ids.clear();
    t.Bpe(piece, &ids);
    if (ids.size() != 1 || ids[0] != id) v.unmerged.push_back(id);
  }
  std::sort(v.unmerged.begin(), v.unmerged.end());
  v.bos = t.bos;
  v.eos = t.eos;
  v.unk = t.unk;
  v.add_bos = t.bos >= 0 && t.frame.before == std::vector<int>{t.bos};
  v.add_eos = t.eos >= 0 && t.frame.after == std::vector<int>{t.eos};
  return v;
}

}  // namespace cputrain::data
