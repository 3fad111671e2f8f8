// UTF-8 decoding and the four code point classes GPT-2's pre-tokenization regex tells apart.
//
// The classes are those of the reference encoder's regex (tiktoken's): Letter = \p{L},
// Number = \p{N}, Space = \s as Unicode's White_Space property, Other = the rest. They come
// from a table generated with node (gen_unicode_classes.js explains why not ICU, and the two
// code points where JavaScript's \s differs), so they match the reference for every code point
// assigned in both Unicode versions (UnicodeClassesVersion()).
//
// Thread safety: every function may be called from any thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/utf8.h"

namespace cputrain::data {

enum class CodePointClass : uint8_t { kOther = 0, kLetter = 1, kNumber = 2, kSpace = 3 };

struct CodePointRange {
  char32_t first;
  char32_t last;
  CodePointClass cls;
};

// UTF-8 decoding is the project's one strict decoder (common/utf8.h); kInvalidCodePoint, which
// DecodeUtf8 returns for a byte that does not start a valid sequence, has the class Other.
using ::cputrain::AppendUtf8;
using ::cputrain::DecodeUtf8;
using ::cputrain::FindInvalidUtf8;
using ::cputrain::kInvalidCodePoint;

namespace internal {
constexpr std::array<CodePointClass, 128> MakeAsciiClasses() {
  std::array<CodePointClass, 128> t{};
  for (int c = 0; c < 128; ++c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
      t[c] = CodePointClass::kLetter;
    } else if (c >= '0' && c <= '9') {
      t[c] = CodePointClass::kNumber;
    } else if (c == ' ' || (c >= '\t' && c <= '\r')) {
      t[c] = CodePointClass::kSpace;
    }
  }
  return t;
}
inline constexpr std::array<CodePointClass, 128> kAsciiClasses = MakeAsciiClasses();
CodePointClass ClassOfNonAscii(char32_t cp);
}  // namespace internal

// The class of a code point; kInvalidCodePoint and surrogates are Other.
inline CodePointClass ClassOf(char32_t cp) {
  return cp < 128 ? internal::kAsciiClasses[cp] : internal::ClassOfNonAscii(cp);
}

// The Unicode version the class table was generated from (e.g. "17.0").
const char* UnicodeClassesVersion();

// The class of the code point that ends just before text[pos] (0 < pos <= size): found by
// stepping back over at most 3 continuation bytes; a byte that is not part of a valid sequence
// is Other, as DecodeUtf8 reads it going forwards.
CodePointClass ClassBefore(std::string_view text, std::size_t pos);

}  // namespace cputrain::data
