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

namespace cputrain::data {

enum class CodePointClass : uint8_t { kOther = 0, kLetter = 1, kNumber = 2, kSpace = 3 };

struct CodePointRange {
  char32_t first;
  char32_t last;
  CodePointClass cls;
};

// Returned by DecodeUtf8 for a byte that does not start a valid sequence; its class is Other.
inline constexpr char32_t kInvalidCodePoint = 0xFFFFFFFF;

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

// Decodes the UTF-8 sequence at p (p < end): returns its length (1-4) and the code point. A
// byte that does not start a well-formed sequence (stray continuation byte, overlong form,
// surrogate, above U+10FFFF, truncated) gives length 1 and kInvalidCodePoint.
inline int DecodeUtf8(const unsigned char* p, const unsigned char* end, char32_t* cp) {
  unsigned char b0 = p[0];
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  auto cont = [&](std::ptrdiff_t i, unsigned char lo, unsigned char hi) {
    return end - p > i && p[i] >= lo && p[i] <= hi;
  };
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    if (cont(1, 0x80, 0xBF)) {
      *cp = (char32_t(b0 & 0x1F) << 6) | (p[1] & 0x3F);
      return 2;
    }
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    // E0 needs A0..BF (no overlongs), ED needs 80..9F (no surrogates).
    unsigned char lo = b0 == 0xE0 ? 0xA0 : 0x80, hi = b0 == 0xED ? 0x9F : 0xBF;
    if (cont(1, lo, hi) && cont(2, 0x80, 0xBF)) {
      *cp = (char32_t(b0 & 0x0F) << 12) | (char32_t(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
      return 3;
    }
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    // F0 needs 90..BF (no overlongs), F4 needs 80..8F (at most U+10FFFF).
    unsigned char lo = b0 == 0xF0 ? 0x90 : 0x80, hi = b0 == 0xF4 ? 0x8F : 0xBF;
    if (cont(1, lo, hi) && cont(2, 0x80, 0xBF) && cont(3, 0x80, 0xBF)) {
      *cp = (char32_t(b0 & 0x07) << 18) | (char32_t(p[1] & 0x3F) << 12) |
            (char32_t(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
      return 4;
    }
  }
  *cp = kInvalidCodePoint;
  return 1;
}

// The class of the code point that ends just before text[pos] (0 < pos <= size): found by
// stepping back over at most 3 continuation bytes; a byte that is not part of a valid sequence
// is Other, as DecodeUtf8 reads it going forwards.
CodePointClass ClassBefore(std::string_view text, std::size_t pos);

// Appends the UTF-8 encoding of cp (< 0x110000) to *out.
inline void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Offset of the first byte of `s` that does not start a valid UTF-8 sequence, or npos.
std::size_t FindInvalidUtf8(std::string_view s);

}  // namespace cputrain::data
