// Strict UTF-8: the one validator every reader of text input uses (YAML configs, --set values,
// tokenizer files, JSON of SQuAD and Hugging Face directories, task files), and the decoder the
// tokenizers step through text with.
//
// Strict means RFC 3629 / Unicode's "well-formed UTF-8" table (Unicode 15, table 3-7): a lead
// byte C2..F4 followed by exactly the continuation bytes it announces, and nothing else. Refused:
//   - a stray continuation byte (80..BF where a character should start);
//   - a lead byte whose continuation bytes are missing (the text ends, or another byte comes);
//   - an overlong form (C0 84 for U+0004: the trick that smuggles a control character past a
//     byte-wise check; also E0 80..9F .., F0 80..8F .. ..);
//   - a UTF-16 surrogate, U+D800..U+DFFF (ED A0..BF ..);
//   - a code point above U+10FFFF (F4 90.., F5..F7) and the bytes F8..FF, which never occur.
// NUL and the other control characters are valid UTF-8; whether a field may hold them is the
// caller's rule (config.cc refuses them in strings).
//
// Thread safety: every function may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/files.h"

namespace cputrain {

// Returned by DecodeUtf8 for a byte that does not start a well-formed sequence.
inline constexpr char32_t kInvalidCodePoint = 0xFFFFFFFF;

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

// Offset of the first byte of `s` that does not start a well-formed sequence, or npos. ASCII
// runs are checked 8 bytes at a time (a 400 MB SQuAD-sized file in well under a second).
std::size_t FindInvalidUtf8(std::string_view s);

// The first fault of a text that is not UTF-8, where it is and why.
struct Utf8Error {
  std::size_t offset = 0;  // of the byte that starts the bad sequence, from 0
  std::size_t line = 0;    // 1-based: newlines ('\n') before offset, plus one
  std::size_t column = 0;  // 1-based, in characters: the text before offset on its line is valid
  std::string reason;      // "0xC0 0x84 is an overlong encoding of U+0004", ...
};

// The first fault of `s`, or nullopt if it is all well-formed UTF-8.
std::optional<Utf8Error> FindUtf8Error(std::string_view s);

// "not valid UTF-8 at byte 17 (line 2, column 5): 0xC0 0x84 is an overlong encoding of U+0004";
// without the line and column when `with_line` is false (a one-line value such as a --set).
std::string DescribeUtf8Error(const Utf8Error& e, bool with_line = true);

// Throws InputError("<what> is not valid UTF-8 at byte ...", hint) for a text that is not UTF-8.
// `what` names the input as the command's messages do: "'configs/x.yaml'", "--set topology=...".
void CheckUtf8(std::string_view text, std::string_view what, std::string_view hint,
               bool with_line = true);

// The hint for a text file that is not UTF-8, when the caller has none better.
inline constexpr std::string_view kUtf8Hint =
    "save the file as UTF-8 (from Latin-1, e.g.: iconv -f latin1 -t utf-8 FILE > FILE.utf8)";

// ReadFile(path, kind) (common/files.h) of a text file, then CheckUtf8 naming it ('path') with
// kUtf8Hint: every reader of a text file the user hands us (CSV, JSONL, JSON, YAML) starts here.
std::string ReadUtf8File(const std::string& path, const InputKind& kind);

}  // namespace cputrain
