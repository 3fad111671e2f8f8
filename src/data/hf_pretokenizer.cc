#include "data/hf_pretokenizer.h"

#include "data/code_points.h"
#include "data/unicode_classes.h"

namespace cputrain::data {

const std::string_view kLlama3SplitPattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const std::string_view kQwen2SplitPattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

namespace {

using internal::At;
using internal::SkipRun;
using Cp = internal::CodePointAt;

inline bool IsCrLf(char32_t c) { return c == '\r' || c == '\n'; }

}  // namespace

bool RegexSplitter::Next(std::string_view* piece) {
  const auto* base = reinterpret_cast<const unsigned char*>(text_.data());
  const unsigned char* end = base + text_.size();
  const unsigned char* start = base + pos_;
  if (start >= end) return false;
  const unsigned char* p = start;
  const Cp c = At(p, end);
  const int max_digits = pattern_ == SplitPattern::kLlama3 ? 3 : 1;
  if (*p == '\'' &&
      (p = start + internal::ContractionLength(start, end, /*ignore_case=*/true)) > start)
    goto done;
  p = start;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (c.cls == CodePointClass::kLetter) {
    p = SkipRun(p, end, CodePointClass::kLetter);
    goto done;
  }
  if (c.cls != CodePointClass::kNumber && !IsCrLf(c.cp) && p + c.len < end &&
      At(p + c.len, end).cls == CodePointClass::kLetter) {
    p = SkipRun(p + c.len, end, CodePointClass::kLetter);
    goto done;
  }
  // \p{N}{1,3} or \p{N}
  if (c.cls == CodePointClass::kNumber) {
    p = SkipRun(p, end, CodePointClass::kNumber, max_digits);
    goto done;
  }
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  if (c.cls == CodePointClass::kOther ||
      (*p == ' ' && p + 1 < end && At(p + 1, end).cls == CodePointClass::kOther)) {
    p = SkipRun(*p == ' ' ? p + 1 : p, end, CodePointClass::kOther);
    while (p < end && (*p == '\r' || *p == '\n')) ++p;
    goto done;
  }
  {
    // A whitespace run [start, run_end); `last` is where its last code point starts.
    const unsigned char* last = start;
    const unsigned char* last_crlf = nullptr;
    const unsigned char* run_end = start;
    while (run_end < end) {
      Cp w = At(run_end, end);
      if (w.cls != CodePointClass::kSpace) break;
      if (IsCrLf(w.cp)) last_crlf = run_end;
      last = run_end;
      run_end += w.len;
    }
    if (last_crlf != nullptr) {
      p = last_crlf + 1;  // \s*[\r\n]+: up to and with the run's last CR/LF
    } else if (run_end < end && last > start) {
      p = last;  // \s+(?!\S): all but the last code point
    } else {
      p = run_end;  // \s+ (a run of one before non-whitespace, or a run that ends the text)
    }
  }
done:
  *piece = std::string_view(reinterpret_cast<const char*>(start), p - start);
  pos_ = static_cast<std::size_t>(p - base);
  return true;
}

bool IsWordSpaceCut(std::string_view text, std::size_t pos) {
  if (pos == 0 || pos >= text.size()) return false;
  auto at = static_cast<unsigned char>(text[pos]);
  if (at >= 0x80 || internal::kAsciiClasses[at] != CodePointClass::kSpace) return false;
  const CodePointClass before = ClassBefore(text, pos);
  return before == CodePointClass::kLetter || before == CodePointClass::kNumber;
}

}  // namespace cputrain::data
