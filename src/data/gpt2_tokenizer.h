// GPT-2's byte-level BPE tokenizer (the public interface is Tokenizer in tokenizer.h).
//
// Encode = pre-tokenize (gpt2_pretokenizer.h), then BPE each piece's raw bytes: start from one
// token per byte (GPT-2's bytes_to_unicode table picks each byte's token in encoder.json) and
// repeatedly merge the adjacent pair with the lowest rank in vocab.bpe, every occurrence of it
// left to right, until no adjacent pair has a rank.
//
// Two equivalent BPE loops: a scan over a small array for short pieces, and a heap of pairs
// over a linked list for long ones (CJK text without spaces, long punctuation or whitespace
// runs), which would be quadratic with the scan. They agree because of a property Load checks:
// every merge's two parts are made by merges of lower rank, so a merge never creates a pair
// that outranks pairs still waiting, and popping (rank, position) from the heap visits merges
// in the scan's order.
//
// The reference encoder keys its ranks by the string "first,second", which lets 11 pairs that
// are not merges (e.g. ('",', '"')) look up a merge's rank. None of them can ever be adjacent
// in a word (each needs a comma that a lower-ranked merge always takes first; an exhaustive
// check of punctuation strings up to length 7 found no difference), so the true merge table is
// used here.
//
// Thread safety: immutable after Load; Encode keeps a bounded per-thread cache of piece -> ids.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"

namespace cputrain::data {

// GPT-2's bytes_to_unicode(): the code point that spells each byte in byte-level vocabularies
// (encoder.json, and the ByteLevel pre-tokenizer of tokenizer.json files). Printable Latin-1
// bytes stand for themselves, the other 68 bytes for U+0100.. in byte order.
const std::vector<char32_t>& ByteLevelCodePoints();

class Gpt2Tokenizer final : public Tokenizer {
 public:
  static constexpr int kVocabSize = kGpt2VocabSize;
  static constexpr int kEotToken = 50256;

  // Reads <dir>/encoder.json and <dir>/vocab.bpe (OpenAI's names), or, when the
  // directory has no encoder.json, <dir>/vocab.json and <dir>/merges.txt (a Hugging Face GPT-2
  // model directory's names for the same mapping and merges). Throws InputError naming a
  // missing or malformed file.
  static std::unique_ptr<Gpt2Tokenizer> Load(const std::string& dir);

  std::string name() const override { return "gpt2"; }
  int vocab_size() const override { return kVocabSize; }
  int eot_token() const override { return kEotToken; }
  void Encode(std::string_view text, std::vector<int>* out) const override;
  std::string Decode(const int* ids, std::size_t n) const override;
  bool IsSafeCut(std::string_view text, std::size_t pos) const override;

  enum class BpeLoop { kAuto, kScan, kHeap };
  // BPE of one piece's bytes, appended to *out, without the cache. Tests use `loop` to run both
  // loops on the same pieces.
  void Bpe(std::string_view piece, std::vector<int>* out, BpeLoop loop = BpeLoop::kAuto) const;

  // Pieces up to this many bytes use the scan loop. Thread CPU time per piece, random Latin
  // words / random CJK runs (2-core Zen 3 box): 16 B scan 1.1 us, heap 1.8 us; 32-33 B 2.4/4.0
  // and 0.93/0.91 us; 48 B 6.2/5.5 and 1.5/1.3 us; 64 B 5.6/6.5 us. The crossover is 32-64 B.
  static constexpr std::size_t kScanMaxBytes = 48;

 private:
  Gpt2Tokenizer() = default;

  // Ids fit 16 bits (V = 50257), so a merge is one 8-byte slot: 50000 merges in 131072 slots
  // (load 0.38) make a 1 MiB table, half the size of 64-bit keys, and BPE is bound by lookups
  // into it.
  struct MergeSlot {
    uint32_t key;  // (left << 16) | right; kEmptyKey if unused
    uint16_t rank;
    uint16_t merged;
  };
  static constexpr uint32_t kEmptyKey = ~uint32_t{0};
  static constexpr int kNoMerge = 1 << 30;  // rank of a pair that does not merge
  static uint32_t PairKey(int left, int right) { return (uint32_t(left) << 16) | uint32_t(right); }
  // The merge of (left, right), or nullptr if they do not merge.
  const MergeSlot* FindMerge(int left, int right) const {
    uint32_t key = PairKey(left, right);
    std::size_t i = (uint64_t{key} * 0x9E3779B97F4A7C15ull) >> merge_shift_;
    while (true) {
      const MergeSlot& s = merges_[i];
      if (s.key == key) return &s;
      if (s.key == kEmptyKey) return nullptr;
      i = (i + 1) & (merges_.size() - 1);
    }
  }
  void InsertMerge(int left, int right, int rank, int merged);
  void BpeScan(const unsigned char* bytes, std::size_t n, std::vector<int>* out) const;
  void BpeHeap(const unsigned char* bytes, std::size_t n, std::vector<int>* out) const;

  int byte_token_[256] = {};
  std::vector<std::string> token_bytes_;  // id -> the raw bytes it stands for
  std::vector<MergeSlot> merges_;         // open addressing, power-of-two size
  int merge_shift_ = 64;
  uint64_t serial_ = 0;  // tells this tokenizer's cache entries apart
};

}  // namespace cputrain::data
