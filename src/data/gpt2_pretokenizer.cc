#include "data/gpt2_pretokenizer.h"

#include "data/code_points.h"
#include "data/unicode_classes.h"

namespace cputrain::data {

using internal::At;
using internal::SkipRun;
using CodePoint = internal::CodePointAt;

bool Gpt2PreTokenizer::Next(std::string_view* piece) {
  const auto* base = reinterpret_cast<const unsigned char*>(text_.data());
  const unsigned char* end = base + text_.size();
  const unsigned char* start = base + pos_;
  if (start >= end) return false;

  const unsigned char* p = start;
  CodePoint c = At(p, end);
  if (*p == '\'') {
    int n = internal::ContractionLength(p, end, /*ignore_case=*/false);
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
  return ClassBefore(text, pos) != CodePointClass::kSpace;
}

}  // namespace cputrain::data
