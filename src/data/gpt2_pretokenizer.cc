#include "data/gpt2_pretokenizer.h"

#include "data/unicode_classes.h"

namespace cputrain::data {
namespace {

struct CodePoint {
  CodePointClass cls;
  int len;  // bytes
};

inline CodePoint At(const unsigned char* p, const unsigned char* end) {
  if (*p < 0x80) return {internal::kAsciiClasses[*p], 1};
  char32_t cp;
  int len = DecodeUtf8(p, end, &cp);
  return {ClassOf(cp), len};
}

// End of the run of code points of class `cls` starting at p.
inline const unsigned char* SkipRun(const unsigned char* p, const unsigned char* end,
                                    CodePointClass cls) {
  while (p < end) {
    if (*p < 0x80) {
      if (internal::kAsciiClasses[*p] != cls) break;
      ++p;
    } else {
      CodePoint c = At(p, end);
      if (c.cls != cls) break;
      p += c.len;
    }
  }
  return p;
}

// Length of the contraction ('s 't 're 've 'm 'll 'd) at p, which holds '\'', or 0.
inline int ContractionLength(const unsigned char* p, const unsigned char* end) {
  if (end - p < 2) return 0;
  switch (p[1]) {
    case 's':
    case 't':
    case 'm':
    case 'd':
      return 2;
    case 'r':
    case 'v':
      return end - p >= 3 && p[2] == 'e' ? 3 : 0;
    case 'l':
      return end - p >= 3 && p[2] == 'l' ? 3 : 0;
    default:
      return 0;
  }
}

}  // namespace

bool Gpt2PreTokenizer::Next(std::string_view* piece) {
  const auto* base = reinterpret_cast<const unsigned char*>(text_.data());
  const unsigned char* end = base + text_.size();
  const unsigned char* start = base + pos_;
  if (start >= end) return false;

  const unsigned char* p = start;
  CodePoint c = At(p, end);
  if (*p == '\'') {
    int n = ContractionLength(p, end);
    if (n > 0) {
      p += n;
      goto done;
    }
  }
  if (*p == ' ' && p + 1 < end) {
    CodePoint next = At(p + 1, end);
    if (next.cls != CodePointClass::kSpace) {  // " ?\p{L}+", " ?\p{N}+" or " ?[^\s\p{L}\p{N}]+"
      p = SkipRun(p + 1 + next.len, end, next.cls);
      goto done;
    }
  }
  if (c.cls != CodePointClass::kSpace) {
    p = SkipRun(p + c.len, end, c.cls);
    goto done;
  }
  {
    // A whitespace run: find its end and where its last code point starts.
    const unsigned char* last = p;
    p += c.len;
    while (p < end) {
      CodePoint w = At(p, end);
      if (w.cls != CodePointClass::kSpace) break;
      last = p;
      p += w.len;
    }
    // Followed by non-whitespace: `\s+(?!\S)` takes all but the last code point; a run of one
    // falls through to `\s+` and is a piece of its own.
    if (p < end && last > start) p = last;
  }
done:
  *piece = std::string_view(reinterpret_cast<const char*>(start), p - start);
  pos_ = static_cast<std::size_t>(p - base);
  return true;
}

bool IsGpt2SafeCut(std::string_view text, std::size_t pos) {
  if (pos == 0 || pos >= text.size()) return false;
  auto at = static_cast<unsigned char>(text[pos]);
  if (at >= 0x80 || internal::kAsciiClasses[at] != CodePointClass::kSpace) return false;
  const auto* base = reinterpret_cast<const unsigned char*>(text.data());
  auto before = base[pos - 1];
  if (before < 0x80) return internal::kAsciiClasses[before] != CodePointClass::kSpace;
  // The code point before pos ends with a continuation byte: find its lead byte (at most 3
  // back). A byte that is not part of a valid sequence counts as Other, as in Next().
  for (std::size_t back = 2; back <= 4 && back <= pos; ++back) {
    const unsigned char* lead = base + pos - back;
    if ((*lead & 0xC0) == 0x80) continue;
    char32_t cp;
    int len = DecodeUtf8(lead, base + pos, &cp);
    if (static_cast<std::size_t>(len) == back) return ClassOf(cp) != CodePointClass::kSpace;
    break;
  }
  return true;
}

}  // namespace cputrain::data
