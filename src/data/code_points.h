// Stepping through UTF-8 text by code point and class, for the hand-written pre-tokenizers
// (gpt2_pretokenizer.cc, hf_pretokenizer.cc; internal to src/data). A byte that does not start
// a valid sequence is one code point of class Other (kInvalidCodePoint).
#pragma once

#include <cstddef>

#include "data/unicode_classes.h"

namespace cputrain::data::internal {

struct CodePointAt {
  CodePointClass cls;
  int len;  // bytes
  char32_t cp;
};

// The code point at p (p < end).
inline CodePointAt At(const unsigned char* p, const unsigned char* end) {
  if (*p < 0x80) return {kAsciiClasses[*p], 1, *p};
  char32_t cp;
  const int len = DecodeUtf8(p, end, &cp);
  return {ClassOf(cp), len, cp};
}

// End of the run of code points of class `cls` from p, at most `max` of them.
inline const unsigned char* SkipRun(const unsigned char* p, const unsigned char* end,
                                    CodePointClass cls, int max = 1 << 30) {
  for (int n = 0; p < end && n < max; ++n) {
    if (*p < 0x80) {
      if (kAsciiClasses[*p] != cls) break;
      ++p;
      continue;
    }
    const CodePointAt c = At(p, end);
    if (c.cls != cls) break;
    p += c.len;
  }
  return p;
}

// Length of the contraction 's 't 're 've 'm 'll 'd at p (which holds '\''), or 0. GPT-2's
// pattern matches them case-sensitively; Llama 3's and Qwen2's as (?i:...), where upper case
// and U+017F LONG S (which folds to 's') match too.
inline int ContractionLength(const unsigned char* p, const unsigned char* end, bool ignore_case) {
  auto at = [&](std::ptrdiff_t i) -> int {
    if (end - p <= i) return 0;
    const unsigned char c = p[i];
    return ignore_case && c >= 'A' && c <= 'Z' ? c + 32 : c;
  };
  switch (at(1)) {
    case 's':
    case 't':
    case 'm':
    case 'd':
      return 2;
    case 'r':
    case 'v':
      return at(2) == 'e' ? 3 : 0;
    case 'l':
      return at(2) == 'l' ? 3 : 0;
    case 0xC5:  // U+017F is C5 BF
      return ignore_case && at(2) == 0xBF ? 3 : 0;
    default:
      return 0;
  }
}

}  // namespace cputrain::data::internal
