// The per-thread cache of BPE results both BPE tokenizers share (internal to src/data): piece
// -> ids, for the tokenizer that owns it (a serial number; a thread that switches tokenizers
// starts a fresh cache). Bounded: cleared when full, so memory stays flat over a corpus of any
// size (~6 MiB per thread at the limit). Pieces longer than kMaxPieceBytes are rare and seldom
// repeat, so they are not cached.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace cputrain::data {

struct WordCache {
  static constexpr std::size_t kMaxEntries = 1 << 16;
  static constexpr std::size_t kMaxPieceBytes = 128;

  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct Span {
    uint32_t offset, size;
  };
  uint64_t owner = 0;
  std::unordered_map<std::string, Span, Hash, std::equal_to<>> map;
  std::vector<int> ids;

  void Reset(uint64_t serial) {
    owner = serial;
    map.clear();
    ids.clear();
  }

  // This thread's cache, emptied first if it belonged to another tokenizer than `serial`.
  static WordCache& For(uint64_t serial);
  // A serial number no other tokenizer of this process has.
  static uint64_t NewSerial();

  // Appends the ids of `piece` to *out: the cached ones, or bpe(piece, out)'s, then cached.
  template <typename Bpe>
  void Encode(std::string_view piece, std::vector<int>* out, const Bpe& bpe) {
    if (piece.size() > kMaxPieceBytes) return bpe(piece, out);
    auto it = map.find(piece);
    if (it != map.end()) {
      const int* cached = ids.data() + it->second.offset;
      out->insert(out->end(), cached, cached + it->second.size);
      return;
    }
    const std::size_t before = out->size();
    bpe(piece, out);
    if (map.size() >= kMaxEntries) Reset(owner);
    auto offset = static_cast<uint32_t>(ids.size());
    ids.insert(ids.end(), out->begin() + before, out->end());
    map.emplace(piece, Span{offset, static_cast<uint32_t>(out->size() - before)});
  }
};

}  // namespace cputrain::data
