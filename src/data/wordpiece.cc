#include "data/wordpiece.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <unordered_map>
#include <utility>

#include "common/error.h"
#include "common/files.h"
#include "common/utf8.h"
#include "data/added_tokens.h"
#include "data/json_file.h"
#include "data/nfc.h"
#include "data/unicode_classes.h"

namespace cputrain::data {
namespace {

struct CodePointSpan {
  char32_t first, last;
};

#include "data/wordpiece_table.inc"

constexpr char kHint[] =
    "use the vocab.txt or tokenizer.json a BERT model ships (transformers' BertTokenizerFast "
    "writes both with save_pretrained); docs/data.md lists what cputrain-numa reads";

// Hangul syllables, which strip_accents (NFD) splits into their jamo (Unicode 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kSCount = 11172, kTCount = 28, kNCount = 588;

template <std::size_t N>
bool In(const CodePointSpan (&spans)[N], char32_t cp) {
  const CodePointSpan* it =
      std::upper_bound(std::begin(spans), std::end(spans), cp,
                       [](char32_t c, const CodePointSpan& s) { return c < s.first; });
  return it != std::begin(spans) && cp <= (it - 1)->last;
}

// A code point map of the table's form (cp, n, n code points ...): cp -> its n code points.
class CodePointMap {
 public:
  template <std::size_t N>
  explicit CodePointMap(const char32_t (&flat)[N]) : flat_(flat) {
    for (std::size_t i = 0; i < N; i += 2 + flat[i + 1]) {
      map_.emplace(flat[i], std::pair{static_cast<uint32_t>(i + 2), flat[i + 1]});
    }
  }
  // False if cp maps to itself; else *first, *n: its code points.
  bool Find(char32_t cp, const char32_t** first, uint32_t* n) const {
    auto it = map_.find(cp);
    if (it == map_.end()) return false;
    *first = flat_ + it->second.first;
    *n = it->second.second;
    return true;
  }

 private:
  const char32_t* flat_;
  std::unordered_map<char32_t, std::pair<uint32_t, uint32_t>> map_;
};

// What each step does to one code point, with the ASCII answers precomputed (most text).
enum CharFlag : uint8_t {
  kDropped = 1,      // clean_text removes it
  kCleanSpace = 2,   // clean_text makes it ' '
  kChinese = 4,      // handle_chinese_chars isolates it
  kPreSpace = 8,     // the pre-tokenizer splits on it
  kPunctuation = 16  // the pre-tokenizer makes it a word
};

struct Tables {
  CodePointMap strip{kStripAccents}, lower{kLowercase};
  std::array<uint8_t, 128> ascii{};
  Tables() {
    for (char32_t c = 0; c < 128; ++c) ascii[c] = Compute(c);
  }
  static uint8_t Compute(char32_t cp) {
    return (In(kCleanDropped, cp) ? kDropped : 0) | (In(kCleanSpaces, cp) ? kCleanSpace : 0) |
           (In(kChineseChars, cp) ? kChinese : 0) | (In(kPreTokenizerSpaces, cp) ? kPreSpace : 0) |
           (In(kPreTokenizerPunctuation, cp) ? kPunctuation : 0);
  }
  uint8_t Flags(char32_t cp) const { return cp < 128 ? ascii[cp] : Compute(cp); }
};

const Tables& T() {
  static const Tables tables;
  return tables;
}

// A character of the normalized text and the byte span of the original character it came from.
struct NormChar {
  char32_t cp;
  uint32_t begin, end;
};

// std::string keys found by string_view (C++20 heterogeneous lookup).
struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

struct Added {
  std::string content;
  int id;
};

}  // namespace

struct WordPieceTokenizer::Impl {
  std::string path;  // the file read
  std::vector<std::string> id_to_token;
  std::unordered_map<std::string, int, StringHash, std::equal_to<>> vocab;  // the model's
  std::size_t max_token_bytes = 0;
  std::string prefix = "##";      // the model's continuation prefix
  std::string dec_prefix = "##";  // the decoder's
  int max_chars = 100;
  bool clean_text = true, chinese = true, strip_accents = true, lowercase = true;
  bool cleanup = true;          // the decoder's
  bool space_cuts = true;       // no added token holds whitespace (IsSafeCut)
  bool join_spaces = false;     // no decoder: tokens joined by spaces
  std::vector<Added> added;     // matched on the raw text
  AddedTokenIndex added_index;  // over added
  int unk = -1, cls = -1, sep = -1, pad = -1, mask = -1;
  SpecialFrame frame;

  void Segment(std::string_view text, uint32_t base, std::vector<int>* ids,
               std::vector<Offset>* offsets) const;
  void Normalize(std::string_view text, uint32_t base, std::vector<NormChar>* out) const;
  void Word(const NormChar* chars, std::size_t n, std::vector<int>* ids,
            std::vector<Offset>* offsets) const;
  void Encode(std::string_view text, std::vector<int>* ids, std::vector<Offset>* offsets) const;
  std::string DecodeIds(const int* ids, std::size_t n, bool continuation) const;
  int IdOf(std::string_view token) const {
    auto it = vocab.find(token);
    if (it != vocab.end()) return it->second;
    for (const Added& a : added) {
      if (a.content == token) return a.id;
    }
    return -1;
  }
};

// clean_text, handle_chinese_chars and strip_accents (with NFD's canonical reordering of the
// marks it keeps), then lowercase, as BertNormalizer runs them.
void WordPieceTokenizer::Impl::Normalize(std::string_view text, uint32_t base,
                                         std::vector<NormChar>* out) const {
  const Tables& t = T();
  out->clear();
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const auto* end = p + text.size();
  // NFD orders each run of marks by combining class (stably). The library's alignments stay with
  // the positions, not the characters, so only code points move. run: where the current run of
  // marks began.
  std::size_t run = 0;
  auto push_stripped = [&](char32_t cp, uint32_t b, uint32_t e) {
    const uint8_t ccc = CanonicalCombiningClass(cp);
    out->push_back({cp, b, e});
    if (ccc == 0) {
      run = out->size();
      return;
    }
    for (std::size_t i = out->size() - 1;
         i > run && CanonicalCombiningClass((*out)[i - 1].cp) > ccc; --i) {
      std::swap((*out)[i - 1].cp, (*out)[i].cp);
    }
  };
  auto push = [&](char32_t cp, uint32_t b, uint32_t e) {
    if (!strip_accents || cp < 0xC0) {
      out->push_back({cp, b, e});
      run = out->size();
      return;
    }
    if (cp >= kSBase && cp < kSBase + kSCount) {
      const char32_t s = cp - kSBase;
      push_stripped(kLBase + s / kNCount, b, e);
      push_stripped(kVBase + (s % kNCount) / kTCount, b, e);
      if (s % kTCount != 0) push_stripped(kTBase + s % kTCount, b, e);
      return;
    }
    const char32_t* first;
    uint32_t n;
    if (!t.strip.Find(cp, &first, &n)) {
      push_stripped(cp, b, e);
      return;
    }
    // A character stripped away entirely still ends a run of marks if it is a starter.
    if (n == 0 && CanonicalCombiningClass(cp) == 0) run = out->size();
    for (uint32_t i = 0; i < n; ++i) push_stripped(first[i], b, e);
  };
  for (const auto* q = p; q < end;) {
    char32_t cp;
    const int len = DecodeUtf8(q, end, &cp);
    if (cp == kInvalidCodePoint) cp = 0xFFFD;
    const auto b = static_cast<uint32_t>(base + (q - p)), e = static_cast<uint32_t>(b + len);
    q += len;
    const uint8_t flags = t.Flags(cp);
    if (clean_text) {
      if (cp == 0 || cp == 0xFFFD || (flags & kDropped)) continue;
      if (flags & kCleanSpace) cp = ' ';
    }
    if (chinese && (flags & kChinese)) {
      push(' ', b, e);
      push(cp, b, e);
      push(' ', b, e);
    } else {
      push(cp, b, e);
    }
  }
  if (!lowercase) return;
  // Lower case; a character may become several (U+0130 İ -> i + U+0307), each keeping its span.
  std::size_t grows = 0;
  for (NormChar& c : *out) {
    const char32_t* first;
    uint32_t n;
    if (c.cp < 128) {
      if (c.cp >= 'A' && c.cp <= 'Z') c.cp += 32;
    } else if (t.lower.Find(c.cp, &first, &n)) {
      if (n == 1) {
        c.cp = first[0];
      } else {
        grows += n - 1;
      }
    }
  }
  if (grows == 0) return;
  std::vector<NormChar> wide;
  wide.reserve(out->size() + grows);
  for (const NormChar& c : *out) {
    const char32_t* first;
    uint32_t n;
    if (c.cp >= 128 && t.lower.Find(c.cp, &first, &n) && n > 1) {
      for (uint32_t i = 0; i < n; ++i) wide.push_back({first[i], c.begin, c.end});
    } else {
      wide.push_back(c);
    }
  }
  *out = std::move(wide);
}

// One pre-tokenized word: WordPiece's greedy longest-match-first.
void WordPieceTokenizer::Impl::Word(const NormChar* chars, std::size_t n, std::vector<int>* ids,
                                    std::vector<Offset>* offsets) const {
  auto unknown = [&] {
    ids->push_back(unk);
    if (offsets) offsets->push_back({chars[0].begin, chars[n - 1].end});
  };
  if (n > static_cast<std::size_t>(max_chars)) return unknown();
  std::string word;
  std::vector<uint32_t> char_at;  // byte -> the index of the character it belongs to
  for (std::size_t i = 0; i < n; ++i) {
    AppendUtf8(chars[i].cp, &word);
    char_at.resize(word.size(), static_cast<uint32_t>(i));
  }
  const std::size_t ids_before = ids->size(), offsets_before = offsets ? offsets->size() : 0;
  std::string candidate;
  for (std::size_t start = 0; start < word.size();) {
    // No token is longer than max_token_bytes, so the longest match starts no further out.
    const std::size_t lead = start > 0 ? prefix.size() : 0;
    const std::size_t budget = max_token_bytes > lead ? max_token_bytes - lead : 0;
    std::size_t end = std::min(word.size(), start + budget);
    int id = -1;
    while (end > start) {
      if (end < word.size() && char_at[end] == char_at[end - 1]) {
        --end;  // inside a character
        continue;
      }
      candidate.assign(prefix, 0, lead);
      candidate.append(word, start, end - start);
      if (auto it = vocab.find(std::string_view(candidate)); it != vocab.end()) {
        id = it->second;
        break;
      }
      --end;
    }
    if (id < 0) {
      ids->resize(ids_before);
      if (offsets) offsets->resize(offsets_before);
      return unknown();
    }
    ids->push_back(id);
    if (offsets) offsets->push_back({chars[char_at[start]].begin, chars[char_at[end - 1]].end});
    start = end;
  }
}

// Text between added tokens: normalize, pre-tokenize, WordPiece each word.
void WordPieceTokenizer::Impl::Segment(std::string_view text, uint32_t base, std::vector<int>* ids,
                                       std::vector<Offset>* offsets) const {
  thread_local std::vector<NormChar> chars;
  Normalize(text, base, &chars);
  const Tables& t = T();
  std::size_t word = 0;
  for (std::size_t i = 0; i < chars.size(); ++i) {
    const uint8_t flags = t.Flags(chars[i].cp);
    if (!(flags & (kPreSpace | kPunctuation))) continue;
    if (i > word) Word(&chars[word], i - word, ids, offsets);
    if (flags & kPunctuation) Word(&chars[i], 1, ids, offsets);
    word = i + 1;
  }
  if (chars.size() > word) Word(&chars[word], chars.size() - word, ids, offsets);
}

void WordPieceTokenizer::Impl::Encode(std::string_view text, std::vector<int>* ids,
                                      std::vector<Offset>* offsets) const {
  std::size_t seg = 0;
  for (std::size_t i = 0; i < text.size();) {
    const int m = added_index.Match(text, i);
    if (m < 0) {
      ++i;
      continue;
    }
    const Added* match = &added[m];
    if (i > seg) Segment(text.substr(seg, i - seg), static_cast<uint32_t>(seg), ids, offsets);
    ids->push_back(match->id);
    if (offsets) {
      offsets->push_back(
          {static_cast<uint32_t>(i), static_cast<uint32_t>(i + match->content.size())});
    }
    i += match->content.size();
    seg = i;
  }
  if (seg < text.size()) Segment(text.substr(seg), static_cast<uint32_t>(seg), ids, offsets);
}

// The library's WordPiece decoder: each token after the first gets a space before it, or loses
// its "##"; cleanup closes up punctuation and contractions within each token.
std::string WordPieceTokenizer::Impl::DecodeIds(const int* ids, std::size_t n,
                                                bool continuation) const {
  std::string out, token;
  for (std::size_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || static_cast<std::size_t>(ids[i]) >= id_to_token.size()) {
      throw InputError(
          fmt::format("token id {} (position {}) is not in the vocabulary of {} "
                      "[0, {})",
                      ids[i], i, path, id_to_token.size()));
    }
    token = id_to_token[ids[i]];
    if (join_spaces) {
      if (i > 0 || continuation) out.push_back(' ');
      out += token;
      continue;
    }
    if (i > 0 || continuation) {
      if (token.starts_with(dec_prefix)) {
        token.erase(0, dec_prefix.size());
      } else {
        token.insert(0, 1, ' ');
      }
    }
    if (cleanup) {
      static const std::pair<std::string_view, std::string_view> kCleanup[] = {
          {" .", "."},   {" ?", "?"},     {" !", "!"},    {" ,", ","},
          {" ' ", "'"},  {" n't", "n't"}, {" 'm", "'m"},  {" do not", " don't"},
          {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
      for (const auto& [from, to] : kCleanup) {
        for (std::size_t at = token.find(from); at != std::string::npos;
             at = token.find(from, at + to.size())) {
          token.replace(at, from.size(), to);
        }
      }
    }
    out += token;
  }
  return out;
}

namespace {

// A vocab.txt: one token a line (a final newline, and a CR before each newline, are not part of
// the tokens).
void LoadVocabTxt(const std::string& path, WordPieceTokenizer::Impl* t) {
  const InputKind kind{"vocabulary", "a BERT vocab.txt (one token a line)", 1ull << 30, kHint};
  const std::string text = ReadUtf8File(path, kind);  // the line of a bad byte named
  if (text.empty()) throw InputError(fmt::format("'{}' is empty: no tokens", path), kHint);
  const std::size_t lines =
      std::count(text.begin(), text.end(), '\n') + (text.back() == '\n' ? 0 : 1);
  if (lines > static_cast<std::size_t>(INT32_MAX)) {
    throw InputError(fmt::format("'{}' has {} lines; ids must fit in 31 bits", path, lines), kHint);
  }
  t->id_to_token.reserve(lines);
  t->vocab.reserve(lines);
  for (std::size_t pos = 0; pos < text.size();) {
    std::size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    std::string token = text.substr(pos, nl - pos);
    if (!token.empty() && token.back() == '\r') token.pop_back();
    const int id = static_cast<int>(t->id_to_token.size());
    auto [it, fresh] = t->vocab.emplace(token, id);
    if (!fresh) {
      throw InputError(fmt::format("'{}': line {}: the token '{}' is also on line {}", path, id + 1,
                                   token, it->second + 1),
                       "each token may appear once in a vocab.txt: remove the duplicate line");
    }
    t->id_to_token.push_back(std::move(token));
    pos = nl + 1;
  }
}

void LoadTokenizerJson(const JsonFile& f, WordPieceTokenizer::Impl* t) {
  const json root = f.Parse();
  if (!root.is_object()) f.Fail("(top level)", "is not a JSON object");
  const json& model = f.At(root, "", "model");
  if (!model.is_object()) f.Fail("model", "is not a JSON object");
  if (const std::string type = f.Type(model, "model"); type != "WordPiece") {
    f.Fail("model.type", fmt::format("'{}' is not WordPiece", type),
           "WordPieceTokenizer reads WordPiece models; MakeTokenizer reads the others");
  }
  const json& vocab = f.At(model, "model", "vocab");
  if (!vocab.is_object()) f.Fail("model.vocab", "is not an object of token -> id");
  if (vocab.empty()) f.Fail("model.vocab", "is empty");
  const json& added = f.Array(root, "", "added_tokens");
  const std::size_t limit = vocab.size() + added.size();
  std::vector<bool> known;
  auto set_id = [&](const std::string& key, const json& v, const std::string& token) {
    return SetTokenId(f, key, v, token, limit, &t->id_to_token, &known);
  };
  t->id_to_token.reserve(limit);
  t->vocab.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    t->vocab.emplace(it.key(), set_id("model.vocab", it.value(), it.key()));
  }
  for (std::size_t i = 0; i < added.size(); ++i) {
    const std::string where = fmt::format("added_tokens[{}]", i);
    const std::string content = f.Str(added[i], where, "content");
    if (content.empty()) f.Fail(where + ".content", "is empty");
    const int id = set_id(where + ".id", f.At(added[i], where, "id"), content);
    for (const char* key : {"single_word", "lstrip", "rstrip", "normalized"}) {
      if (f.Bool(added[i], where, key, false)) {
        f.Fail(JsonFile::Key(where, key), "is true; WordPiece reads added tokens without it",
               fmt::format("set \"{}\": false (BERT's files have it false)", key));
      }
    }
    t->added.push_back({content, id});
  }
  if (const json& unk = model.value("unk_token", json()); unk.is_string()) {
    t->unk = t->IdOf(unk.get<std::string>());
    if (t->unk < 0) {
      f.Fail("model.unk_token", fmt::format("'{}' is not in model.vocab", unk.get<std::string>()),
             "add the unknown token to model.vocab");
    }
  } else {
    f.Fail("model.unk_token", "is missing or not a string",
           "WordPiece needs an unknown token (BERT's is [UNK])");
  }
  if (model.contains("continuing_subword_prefix") &&
      !model["continuing_subword_prefix"].is_null()) {
    t->prefix = f.Str(model, "model", "continuing_subword_prefix");
  }
  t->max_chars = f.Int(model, "model", "max_input_chars_per_word", 100);

  if (const json& n = root.value("normalizer", json()); n.is_null()) {
    t->clean_text = t->chinese = t->strip_accents = t->lowercase = false;
  } else if (const std::string type = f.Type(n, "normalizer"); type == "BertNormalizer") {
    t->clean_text = f.Bool(n, "normalizer", "clean_text", true);
    t->chinese = f.Bool(n, "normalizer", "handle_chinese_chars", true);
    t->lowercase = f.Bool(n, "normalizer", "lowercase", true);
    t->strip_accents = f.Bool(n, "normalizer", "strip_accents", t->lowercase);
  } else {
    f.Fail("normalizer.type",
           fmt::format("normalizer '{}' is not supported with a WordPiece model (supported: "
                       "BertNormalizer, or null)",
                       type),
           "use the tokenizer.json BERT's conversion writes (BertNormalizer + "
           "BertPreTokenizer), or its vocab.txt with a tokenizer_config.json");
  }
  const json& pre = root.value("pre_tokenizer", json());
  if (pre.is_null() || f.Type(pre, "pre_tokenizer") != "BertPreTokenizer") {
    f.Fail(pre.is_null() ? "pre_tokenizer" : "pre_tokenizer.type",
           fmt::format("pre-tokenizer {} is not supported with a WordPiece model (supported: "
                       "BertPreTokenizer)",
                       pre.is_null() ? "null" : "'" + f.Type(pre, "pre_tokenizer") + "'"),
           "use the tokenizer.json BERT's conversion writes (BertNormalizer + "
           "BertPreTokenizer), or its vocab.txt with a tokenizer_config.json");
  }
  LoadPostProcessor(f, root.value("post_processor", json()), "post_processor", known, &t->frame);
  if (const json& d = root.value("decoder", json()); d.is_null()) {
    t->join_spaces = true;
  } else if (const std::string type = f.Type(d, "decoder"); type == "WordPiece") {
    if (d.contains("prefix") && !d["prefix"].is_null())
      t->dec_prefix = f.Str(d, "decoder", "prefix");
    t->cleanup = f.Bool(d, "decoder", "cleanup", true);
  } else {
    f.Fail("decoder.type",
           fmt::format("decoder '{}' is not supported with a WordPiece model (supported: "
                       "WordPiece, or null)",
                       type));
  }
}

}  // namespace

std::unique_ptr<WordPieceTokenizer> WordPieceTokenizer::Load(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path file(path);
  if (fs::is_directory(file, ec)) {
    if (fs::exists(file / "tokenizer.json", ec)) {
      file /= "tokenizer.json";
    } else if (fs::exists(file / "vocab.txt", ec)) {
      file /= "vocab.txt";
    } else {
      throw InputError(
          fmt::format("directory '{}' holds neither tokenizer.json nor vocab.txt", path), kHint);
    }
  }
  auto t = std::make_unique<Impl>();
  t->path = file.string();
  const bool is_json = file.extension() == ".json";
  if (is_json) {
    LoadTokenizerJson(JsonFile(t->path, kHint), t.get());
  } else {
    LoadVocabTxt(t->path, t.get());
  }

  // tokenizer_config.json: the normalizer's switches and the special tokens' names.
  std::string names[5] = {"[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"};
  const char* keys[5] = {"unk_token", "cls_token", "sep_token", "pad_token", "mask_token"};
  const fs::path config_path = file.parent_path() / "tokenizer_config.json";
  if (fs::exists(config_path, ec)) {
    const JsonFile cf(config_path.string(), kHint);
    const json config = cf.Parse();
    if (!config.is_object()) cf.Fail("(top level)", "is not a JSON object");
    // As BertTokenizerFast: its do_lower_case, strip_accents and tokenize_chinese_chars
    // arguments (defaults true, null, true) replace the normalizer's settings; strip_accents null
    // follows lowercase.
    t->lowercase = cf.Bool(config, "", "do_lower_case", true);
    t->chinese = cf.Bool(config, "", "tokenize_chinese_chars", true);
    t->strip_accents = cf.Bool(config, "", "strip_accents", t->lowercase);
    for (int k = 0; k < 5; ++k) {
      if (std::string name = ConfigToken(cf, config, keys[k]); !name.empty()) names[k] = name;
    }
  }
  int* ids[5] = {&t->unk, &t->cls, &t->sep, &t->pad, &t->mask};
  for (int k = 0; k < 5; ++k) {
    // A tokenizer.json's unk is its model's; the config names the others.
    if (k == 0 && is_json) continue;
    *ids[k] = t->IdOf(names[k]);
  }
  if (t->unk < 0) {
    throw InputError(
        fmt::format("'{}': the unknown token '{}' is not in the vocabulary", t->path, names[0]),
        "WordPiece needs one for words it cannot split: add a line [UNK] to "
        "vocab.txt, or name the vocabulary's in tokenizer_config.json's unk_token");
  }
  if (!is_json) {
    // As BertTokenizerFast: the special tokens are added tokens, and [CLS] text [SEP] the
    // template.
    for (int k = 0; k < 5; ++k) {
      if (*ids[k] >= 0) t->added.push_back({names[k], *ids[k]});
    }
    if (t->cls >= 0) t->frame.before = {t->cls};
    if (t->sep >= 0) t->frame.after = {t->sep};
  }
  for (const auto& [token, id] : t->vocab) {
    (void)id;
    t->max_token_bytes = std::max(t->max_token_bytes, token.size());
  }
  for (const Added& a : t->added) {
    for (char c : a.content) t->space_cuts &= !(c == ' ' || (c >= '\t' && c <= '\r'));
  }
  std::vector<std::string_view> contents;
  for (const Added& a : t->added) contents.push_back(a.content);
  t->added_index.Build(contents);
  return std::unique_ptr<WordPieceTokenizer>(new WordPieceTokenizer(std::move(t)));
}

WordPieceTokenizer::WordPieceTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
WordPieceTokenizer::~WordPieceTokenizer() = default;

std::string WordPieceTokenizer::name() const { return impl_->path; }
int WordPieceTokenizer::vocab_size() const { return static_cast<int>(impl_->id_to_token.size()); }
const SpecialFrame& WordPieceTokenizer::special_frame() const { return impl_->frame; }
int WordPieceTokenizer::cls_id() const { return impl_->cls; }
int WordPieceTokenizer::sep_id() const { return impl_->sep; }
int WordPieceTokenizer::pad_id() const { return impl_->pad; }
int WordPieceTokenizer::unk_id() const { return impl_->unk; }
int WordPieceTokenizer::mask_id() const { return impl_->mask; }
bool WordPieceTokenizer::lowercase() const { return impl_->lowercase; }
int WordPieceTokenizer::TokenId(std::string_view token) const { return impl_->IdOf(token); }

void WordPieceTokenizer::Encode(std::string_view text, std::vector<int>* out) const {
  impl_->Encode(text, out, nullptr);
}

void WordPieceTokenizer::EncodeWithOffsets(std::string_view text, std::vector<int>* ids,
                                           std::vector<Offset>* offsets) const {
  if (text.size() > UINT32_MAX) {
    throw InputError(fmt::format("a text of {} bytes is too long for 32-bit offsets", text.size()));
  }
  impl_->Encode(text, ids, offsets);
}

std::string WordPieceTokenizer::Decode(const int* ids, std::size_t n) const {
  return impl_->DecodeIds(ids, n, false);
}

std::string WordPieceTokenizer::DecodeContinuation(const int* ids, std::size_t n) const {
  return impl_->DecodeIds(ids, n, true);
}

bool WordPieceTokenizer::IsSafeCut(std::string_view text, std::size_t pos) const {
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  return impl_->space_cuts && (space(text[pos - 1]) || space(text[pos]));
}

}  // namespace cputrain::data
