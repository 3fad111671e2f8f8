#include "data/nfc.h"

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "data/unicode_classes.h"

namespace cputrain::data {
namespace {

struct CombiningRange {
  char32_t first, last;
  uint8_t ccc;
};
struct Composition {
  char32_t first, second, composite;
};

#include "data/nfc_table.inc"

// Hangul syllables (Unicode 3.12): S = SBase + (L * VCount + V) * TCount + T.
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kSCount = kLCount * kVCount * kTCount;
// A byte that is not valid UTF-8, kept as 0x110000 + byte.
constexpr char32_t kRawByte = 0x110000;

struct Tables {
  std::vector<bool> may_change;  // ccc != 0, decomposable, or the second of a composition
  std::unordered_map<char32_t, std::pair<uint32_t, uint32_t>> decomposition;  // offset, length
  std::unordered_map<uint64_t, char32_t> composition;

  Tables() : may_change(0x110000, false) {
    for (const CombiningRange& r : kCombiningRanges) {
      for (char32_t cp = r.first; cp <= r.last; ++cp) may_change[cp] = true;
    }
    for (std::size_t i = 0; i < std::size(kDecompositions);) {
      const char32_t cp = kDecompositions[i];
      const auto n = static_cast<uint32_t>(kDecompositions[i + 1]);
      decomposition.emplace(cp, std::pair{static_cast<uint32_t>(i + 2), n});
      may_change[cp] = true;
      i += 2 + n;
    }
    for (const Composition& c : kCompositions) {
      composition.emplace(Key(c.first, c.second), c.composite);
      may_change[c.second] = true;
    }
    for (char32_t v = kVBase; v < kVBase + kVCount; ++v) may_change[v] = true;
    for (char32_t t = kTBase + 1; t < kTBase + kTCount; ++t) may_change[t] = true;
  }
  static uint64_t Key(char32_t a, char32_t b) { return (uint64_t{a} << 32) | b; }
};

const Tables& T() {
  static const Tables tables;
  return tables;
}

uint8_t CombiningClass(char32_t cp) {
  const CombiningRange* end = std::end(kCombiningRanges);
  const CombiningRange* r =
      std::upper_bound(std::begin(kCombiningRanges), end, cp,
                       [](char32_t c, const CombiningRange& range) { return c < range.first; });
  if (r == std::begin(kCombiningRanges)) return 0;
  --r;
  return cp <= r->last ? r->ccc : 0;
}

void Decompose(char32_t cp, std::vector<char32_t>* out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t s = cp - kSBase;
    out->push_back(kLBase + s / (kVCount * kTCount));
    out->push_back(kVBase + (s % (kVCount * kTCount)) / kTCount);
    if (s % kTCount != 0) out->push_back(kTBase + s % kTCount);
    return;
  }
  const Tables& t = T();
  auto it = cp < kRawByte ? t.decomposition.find(cp) : t.decomposition.end();
  if (it == t.decomposition.end()) {
    out->push_back(cp);
    return;
  }
  out->insert(out->end(), kDecompositions + it->second.first,
              kDecompositions + it->second.first + it->second.second);
}

// The composite of (a, b), or 0.
char32_t Compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  const auto& map = T().composition;
  auto it = map.find(Tables::Key(a, b));
  return it == map.end() ? 0 : it->second;
}

}  // namespace

const char* NfcUnicodeVersion() { return kNfcUnicodeVersion; }

uint8_t CanonicalCombiningClass(char32_t cp) { return CombiningClass(cp); }

namespace {

// Appends NFC of text[p, end) to *out.
void NfcSpan(const unsigned char* p, const unsigned char* end, std::string* out) {
  // Decompose, then order each run of non-starters by class (stable), then compose.
  std::vector<char32_t> cps;
  cps.reserve(static_cast<std::size_t>(end - p));
  while (p < end) {
    char32_t cp;
    const int len = DecodeUtf8(p, end, &cp);
    Decompose(cp == kInvalidCodePoint ? kRawByte + *p : cp, &cps);
    p += len;
  }
  auto ccc = [](char32_t cp) { return cp >= kRawByte ? uint8_t{0} : CombiningClass(cp); };
  for (std::size_t i = 0; i < cps.size();) {
    if (ccc(cps[i]) == 0) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < cps.size() && ccc(cps[j]) != 0) ++j;
    std::stable_sort(cps.begin() + i, cps.begin() + j,
                     [&](char32_t a, char32_t b) { return ccc(a) < ccc(b); });
    i = j;
  }
  // UAX #15's composition: a character joins the last starter if nothing between them blocks
  // it (a character of the same or higher class, or a starter).
  std::size_t starter = 0, kept = 1;
  int last_class = cps.empty() ? 0 : (ccc(cps[0]) == 0 ? 0 : 256);
  for (std::size_t i = 1; i < cps.size(); ++i) {
    const char32_t c = cps[i];
    const int cls = ccc(c);
    const char32_t composite =
        cps[starter] < kRawByte && c < kRawByte && (last_class < cls || last_class == 0)
            ? Compose(cps[starter], c)
            : 0;
    if (composite != 0 && ccc(cps[starter]) == 0) {
      cps[starter] = composite;
      continue;
    }
    if (cls == 0) starter = kept;
    last_class = cls;
    cps[kept++] = c;
  }
  cps.resize(std::min(kept, cps.size()));
  for (char32_t cp : cps) {
    if (cp >= kRawByte) {
      out->push_back(static_cast<char>(cp - kRawByte));
    } else {
      AppendUtf8(cp, out);
    }
  }
}

// True if NFC can change the code point at p, or something next to it (may_change).
bool MayChange(const unsigned char* p, const unsigned char* end, int* len) {
  if (*p < 0x80) {
    *len = 1;
    return false;
  }
  char32_t cp;
  *len = DecodeUtf8(p, end, &cp);
  return cp != kInvalidCodePoint && T().may_change[cp];
}

}  // namespace

bool Nfc(std::string_view text, std::string* out) {
  const auto* begin = reinterpret_cast<const unsigned char*>(text.data());
  const auto* end = begin + text.size();
  // A code point that NFC leaves alone (not may_change: class 0, no decomposition, the second
  // of no composition) starts a stretch that normalizes on its own: nothing before it composes
  // with it or reorders past it. So only the stretches from the stable code point before each
  // changeable one to the next stable one go through NfcSpan; the rest is copied.
  const unsigned char* stable = begin;  // start of the last stable code point (or the text)
  const unsigned char* copied = begin;  // out holds NFC of text[begin, copied)
  bool changed = false;
  int len = 0;
  for (const unsigned char* p = begin; p < end;) {
    if (!MayChange(p, end, &len)) {
      stable = p;
      p += len;
      continue;
    }
    if (!changed) {
      out->clear();
      changed = true;
    }
    const unsigned char* q = p + len;
    while (q < end && MayChange(q, end, &len)) q += len;
    out->append(reinterpret_cast<const char*>(copied), stable - copied);
    NfcSpan(stable, q, out);
    copied = stable = p = q;
  }
  if (!changed) return false;
  out->append(reinterpret_cast<const char*>(copied), end - copied);
  return true;
}

}  // namespace cputrain::data
