#include "data/unicode_classes.h"

#include <cstring>
#include <vector>

namespace cputrain::data {
namespace {

#include "data/unicode_classes_table.inc"

// Two-level lookup built once from the ranges: stage1 maps each 256-code-point block to a
// deduplicated block of classes in stage2 (~270 distinct blocks, ~70 KiB), so a lookup is two
// loads that stay in cache for text in one script.
struct ClassTable {
  static constexpr char32_t kBlockBits = 8, kBlockSize = 1u << kBlockBits;
  static constexpr char32_t kNumBlocks = 0x110000 >> kBlockBits;
  std::vector<uint16_t> stage1;
  std::vector<CodePointClass> stage2;

  ClassTable() {
    std::vector<CodePointClass> flat(0x110000, CodePointClass::kOther);
    for (const CodePointRange& r : kCodePointRanges) {
      for (char32_t cp = r.first; cp <= r.last; ++cp) flat[cp] = r.cls;
    }
    stage1.resize(kNumBlocks);
    for (char32_t b = 0; b < kNumBlocks; ++b) {
      const CodePointClass* block = flat.data() + b * kBlockSize;
      std::size_t found = stage2.size();
      for (std::size_t s = 0; s < stage2.size(); s += kBlockSize) {
        if (std::memcmp(stage2.data() + s, block, kBlockSize) == 0) {
          found = s;
          break;
        }
      }
      if (found == stage2.size()) stage2.insert(stage2.end(), block, block + kBlockSize);
      stage1[b] = static_cast<uint16_t>(found / kBlockSize);
    }
  }

  CodePointClass Lookup(char32_t cp) const {
    if (cp >= 0x110000) return CodePointClass::kOther;
    return stage2[(std::size_t{stage1[cp >> kBlockBits]} << kBlockBits) | (cp & (kBlockSize - 1))];
  }
};

// Built on first use (a few ms), so commands that never tokenize do not pay for it.
const ClassTable& Table() {
  static const ClassTable table;
  return table;
}

}  // namespace

namespace internal {
CodePointClass ClassOfNonAscii(char32_t cp) { return Table().Lookup(cp); }
}  // namespace internal

const char* UnicodeClassesVersion() { return kUnicodeClassesVersion; }

CodePointClass ClassBefore(std::string_view text, std::size_t pos) {
  const auto* base = reinterpret_cast<const unsigned char*>(text.data());
  const unsigned char before = base[pos - 1];
  if (before < 0x80) return internal::kAsciiClasses[before];
  // A continuation byte: find its lead byte (at most 3 back).
  for (std::size_t back = 2; back <= 4 && back <= pos; ++back) {
    const unsigned char* lead = base + pos - back;
    if ((*lead & 0xC0) == 0x80) continue;
    char32_t cp;
    int len = DecodeUtf8(lead, base + pos, &cp);
    if (static_cast<std::size_t>(len) == back) return ClassOf(cp);
    break;
  }
  return CodePointClass::kOther;
}

}  // namespace cputrain::data
