#include "common/utf8.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "common/error.h"

namespace cputrain {
namespace {

std::string Bytes(const unsigned char* p, std::size_t n) {
  std::string s;
  for (std::size_t i = 0; i < n; ++i) s += fmt::format("{}0x{:02X}", i ? " " : "", p[i]);
  return s;
}

// Why the sequence at p (p < end), which DecodeUtf8 refused, is not UTF-8.
std::string Reason(const unsigned char* p, const unsigned char* end) {
  const unsigned char b0 = p[0];
  if (b0 >= 0x80 && b0 <= 0xBF) {
    return fmt::format("0x{:02X} is a continuation byte with no lead byte before it", b0);
  }
  if (b0 >= 0xF8) return fmt::format("0x{:02X} never occurs in UTF-8", b0);
  const std::size_t len = b0 < 0xE0 ? 2 : b0 < 0xF0 ? 3 : 4;
  std::size_t have = 1;
  while (have < len && p + have < end && (p[have] & 0xC0) == 0x80) ++have;
  if (have < len) {
    if (p + have == end) {
      return fmt::format("{} starts a {}-byte sequence that the text ends inside", Bytes(p, have),
                         len);
    }
    return fmt::format(
        "{} starts a {}-byte sequence, but 0x{:02X} after it is not a "
        "continuation byte",
        Bytes(p, have), len, p[have]);
  }
  char32_t cp = b0 & (0x7F >> len);
  for (std::size_t i = 1; i < len; ++i) cp = (cp << 6) | (p[i] & 0x3F);
  const char32_t shortest = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
  if (cp < shortest) {
    return fmt::format("{} is an overlong encoding of U+{:04X}", Bytes(p, len),
                       static_cast<uint32_t>(cp));
  }
  if (cp >= 0xD800 && cp <= 0xDFFF) {
    return fmt::format("{} encodes U+{:04X}, a UTF-16 surrogate, which UTF-8 may not hold",
                       Bytes(p, len), static_cast<uint32_t>(cp));
  }
  return fmt::format("{} encodes U+{:X}, above U+10FFFF, the last code point", Bytes(p, len),
                     static_cast<uint32_t>(cp));
}

}  // namespace

std::size_t FindInvalidUtf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const auto* end = p + s.size();
  const auto* begin = p;
  while (p < end) {
    // ASCII runs are the common case: check 8 bytes at a time.
    while (end - p >= 8) {
      uint64_t w;
      std::memcpy(&w, p, 8);
      if (w & 0x8080808080808080ull) break;
      p += 8;
    }
    if (p == end) break;
    char32_t cp;
    int n = DecodeUtf8(p, end, &cp);
    if (cp == kInvalidCodePoint) return static_cast<std::size_t>(p - begin);
    p += n;
  }
  return std::string_view::npos;
}

std::optional<Utf8Error> FindUtf8Error(std::string_view s) {
  const std::size_t bad = FindInvalidUtf8(s);
  if (bad == std::string_view::npos) return std::nullopt;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  Utf8Error e;
  e.offset = bad;
  const std::string_view before = s.substr(0, bad);
  e.line = 1 + static_cast<std::size_t>(std::count(before.begin(), before.end(), '\n'));
  const std::size_t nl = before.rfind('\n');
  const std::size_t line_start = nl == std::string_view::npos ? 0 : nl + 1;
  // Everything before `bad` is well-formed: its characters are its bytes that are not
  // continuation bytes.
  e.column = 1 + static_cast<std::size_t>(std::count_if(
                     p + line_start, p + bad, [](unsigned char b) { return (b & 0xC0) != 0x80; }));
  e.reason = Reason(p + bad, p + s.size());
  return e;
}

std::string DescribeUtf8Error(const Utf8Error& e, bool with_line) {
  if (!with_line) return fmt::format("not valid UTF-8 at byte {}: {}", e.offset, e.reason);
  return fmt::format("not valid UTF-8 at byte {} (line {}, column {}): {}", e.offset, e.line,
                     e.column, e.reason);
}

void CheckUtf8(std::string_view text, std::string_view what, std::string_view hint,
               bool with_line) {
  if (auto e = FindUtf8Error(text)) {
    throw InputError(fmt::format("{} is {}", what, DescribeUtf8Error(*e, with_line)),
                     std::string(hint));
  }
}

std::string ReadUtf8File(const std::string& path, const InputKind& kind) {
  std::string text = ReadFile(path, kind);
  CheckUtf8(text, fmt::format("'{}'", path), kUtf8Hint);
  return text;
}

}  // namespace cputrain
