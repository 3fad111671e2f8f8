#include "text/python_text.h"

#include <algorithm>
#include <iterator>

namespace cputrain::task {
namespace {

struct CodeRange {
  char32_t first, last;
};
struct LowerPair {
  char32_t from, to;
};
struct TitleMap {
  char32_t from, to[3];  // unused places 0
};
#include "text/python_text_table.inc"

template <std::size_t N>
bool InRanges(const CodeRange (&table)[N], char32_t c) {
  const CodeRange* it =
      std::upper_bound(std::begin(table), std::end(table), c,
                       [](char32_t v, const CodeRange& r) { return v < r.first; });
  return it != std::begin(table) && c <= std::prev(it)->last;
}

bool IsCaseIgnorable(char32_t c) { return InRanges(kCaseIgnorableRanges, c); }
bool IsCased(char32_t c) { return InRanges(kCasedRanges, c); }

// CPython's handle_capital_sigma: U+03A3 lowers to the final form U+03C2 when a cased letter
// precedes it and none follows, case-ignorable code points skipped on both sides.
char32_t LowerSigma(const std::vector<char32_t>& cps, std::size_t i) {
  std::size_t j = i;
  while (j > 0 && IsCaseIgnorable(cps[j - 1])) --j;
  if (j == 0 || !IsCased(cps[j - 1])) return 0x3C3;
  j = i + 1;
  while (j < cps.size() && IsCaseIgnorable(cps[j])) ++j;
  return j == cps.size() || !IsCased(cps[j]) ? 0x3C2 : 0x3C3;
}

std::vector<char32_t> CodePoints(std::string_view s) {
  std::vector<char32_t> cps;
  cps.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) cps.push_back(NextCodePoint(s, &i));
  return cps;
}

bool IsAsciiPunctuation(char c) {
  // Python's string.punctuation.
  return std::string_view("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~").find(c) != std::string_view::npos;
}

}  // namespace

char32_t NextCodePoint(std::string_view s, std::size_t* i) {
  const auto b0 = static_cast<unsigned char>(s[*i]);
  int len = b0 < 0x80 ? 1 : (b0 >> 5) == 6 ? 2 : (b0 >> 4) == 14 ? 3 : (b0 >> 3) == 30 ? 4 : 0;
  if (len == 0 || *i + len > s.size()) {
    ++*i;
    return 0xFFFD;
  }
  char32_t c = len == 1 ? b0 : b0 & (0x7F >> len);
  for (int k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[*i + k]);
    if ((b & 0xC0) != 0x80) {
      ++*i;
      return 0xFFFD;
    }
    c = (c << 6) | (b & 0x3F);
  }
  *i += len;
  return c;
}

std::size_t CountCodePoints(std::string_view s) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < s.size(); ++n) NextCodePoint(s, &i);
  return n;
}

std::size_t CharsToBytes(std::string_view s, std::size_t chars) {
  std::size_t i = 0, n = 0;
  for (; i < s.size() && n < chars; ++n) NextCodePoint(s, &i);
  return i + (chars - n);
}

bool PyIsSpace(char32_t c) { return InRanges(kSpaceRanges, c); }
bool PyIsWord(char32_t c) { return InRanges(kWordRanges, c); }

std::string_view PyLstrip(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    std::size_t next = i;
    if (!PyIsSpace(NextCodePoint(s, &next))) break;
    i = next;
  }
  return s.substr(i);
}

std::vector<std::string_view> PySplit(std::string_view s) {
  std::vector<std::string_view> words;
  std::size_t i = 0, start = std::string_view::npos;
  while (i < s.size()) {
    const std::size_t at = i;
    const bool space = PyIsSpace(NextCodePoint(s, &i));
    if (space && start != std::string_view::npos) {
      words.push_back(s.substr(start, at - start));
      start = std::string_view::npos;
    } else if (!space && start == std::string_view::npos) {
      start = at;
    }
  }
  if (start != std::string_view::npos) words.push_back(s.substr(start));
  return words;
}

namespace {

// CPython's lower_ucs4: code point i of cps lowered (full mapping, the final sigma in context).
void AppendLower(const std::vector<char32_t>& cps, std::size_t i, std::string* out) {
  const char32_t c = cps[i];
  if (c == 0x130) {  // the one code point str.lower() maps to two: i + combining dot above
    AppendUtf8('i', out);
    AppendUtf8(0x307, out);
    return;
  }
  if (c == 0x3A3) {
    AppendUtf8(LowerSigma(cps, i), out);
    return;
  }
  const LowerPair* it = std::lower_bound(std::begin(kLowerPairs), std::end(kLowerPairs), c,
                                         [](const LowerPair& p, char32_t v) { return p.from < v; });
  AppendUtf8(it != std::end(kLowerPairs) && it->from == c ? it->to : c, out);
}

}  // namespace

std::string PyLower(std::string_view s) {
  const std::vector<char32_t> cps = CodePoints(s);
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < cps.size(); ++i) AppendLower(cps, i, &out);
  return out;
}

bool PyIsPrintable(char32_t c) { return InRanges(kPrintableRanges, c); }

std::string PyCapitalize(std::string_view s) {
  const std::vector<char32_t> cps = CodePoints(s);
  std::string out;
  out.reserve(s.size());
  if (cps.empty()) return out;
  const TitleMap* it = std::lower_bound(std::begin(kTitleMaps), std::end(kTitleMaps), cps[0],
                                        [](const TitleMap& m, char32_t v) { return m.from < v; });
  if (it != std::end(kTitleMaps) && it->from == cps[0]) {
    for (char32_t t : it->to) {
      if (t != 0) AppendUtf8(t, &out);
    }
  } else {
    AppendUtf8(cps[0], &out);
  }
  for (std::size_t i = 1; i < cps.size(); ++i) AppendLower(cps, i, &out);
  return out;
}

std::string NormalizeAnswer(std::string_view s) {
  std::string lowered = PyLower(s);
  std::string no_punct;
  no_punct.reserve(lowered.size());
  // ASCII bytes never occur inside a multi-byte UTF-8 sequence: a byte filter is a char filter.
  for (char c : lowered) {
    if (!IsAsciiPunctuation(c)) no_punct.push_back(c);
  }
  // re.sub(r'\b(a|an|the)\b', ' ', text): the alternatives tried in order at each position, the
  // boundaries judged on the original text (re.sub scans it, not its own output).
  const std::vector<char32_t> cps = CodePoints(no_punct);
  auto word_at = [&](std::size_t k) { return k < cps.size() && PyIsWord(cps[k]); };
  auto matches = [&](std::size_t i, std::u32string_view w) {
    if (cps.size() - i < w.size() || !std::equal(w.begin(), w.end(), cps.begin() + i)) return 0;
    return word_at(i + w.size()) ? 0 : static_cast<int>(w.size());
  };
  std::string no_articles;
  no_articles.reserve(no_punct.size());
  for (std::size_t i = 0; i < cps.size();) {
    int len = 0;
    if (i == 0 || !PyIsWord(cps[i - 1])) {
      len = matches(i, U"a");
      if (len == 0) len = matches(i, U"an");
      if (len == 0) len = matches(i, U"the");
    }
    if (len > 0) {
      no_articles.push_back(' ');
      i += len;
    } else {
      AppendUtf8(cps[i++], &no_articles);
    }
  }
  std::string out;
  out.reserve(no_articles.size());
  for (std::string_view w : PySplit(no_articles)) {
    if (!out.empty()) out.push_back(' ');
    out.append(w);
  }
  return out;
}

const char* PythonUnicodeVersion() { return CPUTRAIN_PYTHON_UNICODE_VERSION; }

}  // namespace cputrain::task
