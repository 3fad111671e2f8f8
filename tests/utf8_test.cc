// The shared strict UTF-8 validator (common/utf8.h): every class of ill-formed sequence in
// Unicode's table 3-7 is refused with its byte offset, line, column and reason; every well-formed
// boundary case passes; and the validator agrees with an independent bit-level reference on every
// 1-, 2- and 3-byte input and on random 4-byte ones.
#include "common/utf8.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "common/error.h"

namespace cputrain {
namespace {

std::string B(std::initializer_list<int> bytes) {
  std::string s;
  for (int b : bytes) s.push_back(static_cast<char>(b));
  return s;
}

// The reference: decode by the definition (lead byte's length, continuation bytes, then the
// value's range), with no range tables; the validator under test uses per-lead ranges.
bool ReferenceValid(const std::string& s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    std::size_t len = b0 < 0x80         ? 1
                      : (b0 >> 5) == 6  ? 2
                      : (b0 >> 4) == 14 ? 3
                      : (b0 >> 3) == 30 ? 4
                                        : 0;
    if (len == 0 || i + len > s.size()) return false;
    uint32_t cp = len == 1 ? b0 : b0 & (0x7F >> len);
    for (std::size_t k = 1; k < len; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (b & 0x3F);
    }
    const uint32_t shortest[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < shortest[len] || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return false;
    i += len;
  }
  return true;
}

TEST(Utf8, WellFormedBoundariesPass) {
  const std::string ok[] = {
      "",
      "plain ASCII, with NUL \0 and controls \x01\x7f",
      B({0xC2, 0x80}),              // U+0080, the first 2-byte character
      B({0xDF, 0xBF}),              // U+07FF
      B({0xE0, 0xA0, 0x80}),        // U+0800
      B({0xED, 0x9F, 0xBF}),        // U+D7FF, just below the surrogates
      B({0xEE, 0x80, 0x80}),        // U+E000, just above them
      B({0xEF, 0xBF, 0xBF}),        // U+FFFF
      B({0xF0, 0x90, 0x80, 0x80}),  // U+10000
      B({0xF4, 0x8F, 0xBF, 0xBF}),  // U+10FFFF, the last code point
      "na\xC3\xAFve caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80",
  };
  for (const std::string& s : ok) {
    EXPECT_FALSE(FindUtf8Error(s)) << s;
    EXPECT_EQ(FindInvalidUtf8(s), std::string::npos);
    EXPECT_NO_THROW(CheckUtf8(s, "x", "h"));
  }
}

struct Bad {
  std::string text;
  std::size_t offset;
  const char* reason;
};

TEST(Utf8, EveryIllFormedClassIsRefusedWithItsOffsetAndReason) {
  const Bad bad[] = {
      // Overlong forms: the fuzz_config crash smuggled U+0004 in as C0 84.
      {std::string("ab") + B({0xC0, 0x84}), 2, "0xC0 0x84 is an overlong encoding of U+0004"},
      {B({0xC1, 0xBF}), 0, "0xC1 0xBF is an overlong encoding of U+007F"},
      {B({0xE0, 0x80, 0xAF}), 0, "0xE0 0x80 0xAF is an overlong encoding of U+002F"},
      {B({0xE0, 0x9F, 0xBF}), 0, "0xE0 0x9F 0xBF is an overlong encoding of U+07FF"},
      {B({0xF0, 0x8F, 0xBF, 0xBF}), 0, "0xF0 0x8F 0xBF 0xBF is an overlong encoding of U+FFFF"},
      // Surrogates.
      {B({0xED, 0xA0, 0x80}), 0, "0xED 0xA0 0x80 encodes U+D800, a UTF-16 surrogate"},
      {B({0xED, 0xBF, 0xBF}), 0, "0xED 0xBF 0xBF encodes U+DFFF, a UTF-16 surrogate"},
      // Above U+10FFFF.
      {B({0xF4, 0x90, 0x80, 0x80}), 0, "encodes U+110000, above U+10FFFF"},
      {B({0xF7, 0xBF, 0xBF, 0xBF}), 0, "encodes U+1FFFFF, above U+10FFFF"},
      {B({0xF8, 0x88, 0x80, 0x80, 0x80}), 0, "0xF8 never occurs in UTF-8"},
      {B({0xFF}), 0, "0xFF never occurs in UTF-8"},
      // Stray continuation bytes.
      {std::string("x") + B({0x80}), 1, "0x80 is a continuation byte with no lead byte before it"},
      {B({0xC3, 0xA9, 0xA9}), 2, "0xA9 is a continuation byte with no lead byte"},
      // Missing continuation bytes: the text ends, or another byte comes.
      {std::string("abc") + B({0xE2, 0x82}), 3,
       "0xE2 0x82 starts a 3-byte sequence that the text ends inside"},
      {B({0xF0, 0x9F, 0x98}), 0, "starts a 4-byte sequence that the text ends inside"},
      {B({0xC3}) + "a", 0,
       "0xC3 starts a 2-byte sequence, but 0x61 after it is not a continuation"},
      {B({0xE2, 0x82, 0xC3, 0xA9}), 0, "but 0xC3 after it is not a continuation byte"},
  };
  for (const Bad& b : bad) {
    auto e = FindUtf8Error(b.text);
    ASSERT_TRUE(e) << b.reason;
    EXPECT_EQ(e->offset, b.offset) << b.reason;
    EXPECT_EQ(FindInvalidUtf8(b.text), b.offset) << b.reason;
    EXPECT_NE(e->reason.find(b.reason), std::string::npos) << e->reason << "\nwanted: " << b.reason;
  }
}

TEST(Utf8, ReportsLineAndColumnInCharacters) {
  // Line 3; before the bad byte on that line: "é", "x", "日" = 3 characters (6 bytes).
  const std::string text = "line one\nline two\n\xC3\xA9x\xE6\x97\xA5" + B({0xC0, 0x84}) + "\n";
  auto e = FindUtf8Error(text);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->offset, 24u);
  EXPECT_EQ(e->line, 3u);
  EXPECT_EQ(e->column, 4u);
  EXPECT_EQ(DescribeUtf8Error(*e),
            "not valid UTF-8 at byte 24 (line 3, column 4): 0xC0 0x84 is an overlong encoding "
            "of U+0004");
  EXPECT_EQ(DescribeUtf8Error(*e, false),
            "not valid UTF-8 at byte 24: 0xC0 0x84 is an overlong encoding of U+0004");
}

TEST(Utf8, CheckThrowsInputErrorNamingTheInputWithTheHint) {
  try {
    CheckUtf8(std::string("a") + B({0xED, 0xA0, 0x80}), "'vocab.txt'", "save it as UTF-8");
    FAIL() << "accepted a surrogate";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(),
                 "'vocab.txt' is not valid UTF-8 at byte 1 (line 1, column 2): 0xED 0xA0 0x80 "
                 "encodes U+D800, a UTF-16 surrogate, which UTF-8 may not hold");
    EXPECT_EQ(e.hint(), "save it as UTF-8");
  }
}

// The fast path skips ASCII 8 bytes at a time: a bad byte at every position of a long ASCII run
// (and right after a multi-byte character) is still found at its own offset.
TEST(Utf8, FindsTheFirstBadByteAtEveryPositionPastTheAsciiFastPath) {
  for (std::size_t pos = 0; pos < 40; ++pos) {
    std::string s(48, 'a');
    s.replace(5, 2, "\xC3\xA9");
    if (pos == 5 || pos == 6) continue;
    s[pos] = static_cast<char>(0xFF);
    EXPECT_EQ(FindInvalidUtf8(s), pos);
    EXPECT_EQ(FindUtf8Error(s)->offset, pos);
  }
}

TEST(Utf8, AgreesWithTheReferenceOnAllShortInputs) {
  long tried = 0;
  for (int a = 0; a < 256; ++a) {
    const std::string one = B({a});
    ASSERT_EQ(!FindUtf8Error(one), ReferenceValid(one)) << a;
    for (int b = 0; b < 256; ++b) {
      const std::string two = B({a, b});
      ASSERT_EQ(!FindUtf8Error(two), ReferenceValid(two)) << a << " " << b;
      // Third bytes: the boundary values of each class, enough to reach every branch.
      for (int c :
           {0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC2, 0xE0, 0xF0, 0xFF}) {
        const std::string three = B({a, b, c});
        ASSERT_EQ(!FindUtf8Error(three), ReferenceValid(three)) << a << " " << b << " " << c;
        ++tried;
      }
    }
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    // Bias towards lead and continuation bytes so 4-byte sequences are common.
    std::string s;
    for (int k = 0; k < 4; ++k) {
      const uint32_t r = rng();
      s.push_back(static_cast<char>(k == 0 ? 0xC0 + r % 64 : 0x70 + r % 0x60));
    }
    ASSERT_EQ(!FindUtf8Error(s), ReferenceValid(s));
    ++tried;
  }
  EXPECT_GT(tried, 1000000);
}

TEST(Utf8, DecodeAndAppendRoundTripEveryCodePoint) {
  for (char32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    std::string s;
    AppendUtf8(cp, &s);
    char32_t back = 0;
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    ASSERT_EQ(DecodeUtf8(p, p + s.size(), &back), static_cast<int>(s.size()));
    ASSERT_EQ(back, cp);
  }
}

}  // namespace
}  // namespace cputrain
