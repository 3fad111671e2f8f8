// Jinja2's int, float and round filters (jinja.h), with Python's number semantics underneath:
// int(str) and float(str) syntax (underscores between digits, inf/nan, ASCII whitespace), the
// fallback of "42.5"|int through float, and round() of a float as CPython rounds it (to the
// nearest decimal of the double's exact value, ties to even), not by scaling by 10**n.
#include <cmath>
#include <cstdio>
#include <string>

#include "chat/jinja.h"
#include "fmt/format.h"

namespace cputrain::chat::jinja {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsAsciiSpace(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

// Python's digitpart at t[*pos]: digits, single underscores between them. Appends the digits.
bool DigitPart(std::string_view t, std::size_t* pos, std::string* digits) {
  if (*pos >= t.size() || !IsDigit(t[*pos])) return false;
  while (*pos < t.size()) {
    if (IsDigit(t[*pos])) {
      *digits += t[(*pos)++];
    } else if (t[*pos] == '_' && *pos + 1 < t.size() && IsDigit(t[*pos + 1])) {
      ++*pos;
    } else {
      break;
    }
  }
  return true;
}

std::string_view StripAscii(std::string_view t) {
  while (!t.empty() && IsAsciiSpace(t.front())) t.remove_prefix(1);
  while (!t.empty() && IsAsciiSpace(t.back())) t.remove_suffix(1);
  return t;
}

// int(text): [sign] digitpart. Refused past 64 bits (Python's int has no bound).
std::optional<int64_t> ParseInt(std::string_view t, int line) {
  std::size_t pos = 0;
  const bool neg = pos < t.size() && t[pos] == '-';
  if (pos < t.size() && (t[pos] == '-' || t[pos] == '+')) ++pos;
  std::string digits;
  if (!DigitPart(t, &pos, &digits) || pos != t.size()) return std::nullopt;
  __int128 v = 0;
  for (char c : digits) {
    v = v * 10 + (c - '0');
    if (v > (__int128{1} << 63)) Fail(line, "int(): the number does not fit 64 bits");
  }
  if (neg) v = -v;
  if (v > INT64_MAX) Fail(line, "int(): the number does not fit 64 bits");
  return static_cast<int64_t>(v);
}

// float(text): [sign] (inf | infinity | nan | digitpart [. [digitpart]] [exponent] |
// . digitpart [exponent]), case-insensitive words, exponent e [sign] digitpart.
std::optional<double> ParseFloat(std::string_view t) {
  std::size_t pos = 0;
  const bool neg = pos < t.size() && t[pos] == '-';
  if (pos < t.size() && (t[pos] == '-' || t[pos] == '+')) ++pos;
  std::string word;
  for (std::size_t k = pos; k < t.size(); ++k) word += static_cast<char>(std::tolower(t[k]));
  if (word == "inf" || word == "infinity") return neg ? -HUGE_VAL : HUGE_VAL;
  if (word == "nan") return std::copysign(std::nan(""), neg ? -1.0 : 1.0);
  std::string text = neg ? "-" : "";
  bool mantissa = DigitPart(t, &pos, &text);
  if (pos < t.size() && t[pos] == '.') {
    text += t[pos++];
    mantissa = DigitPart(t, &pos, &text) || mantissa;
  }
  if (!mantissa) return std::nullopt;
  if (pos < t.size() && (t[pos] == 'e' || t[pos] == 'E')) {
    text += t[pos++];
    if (pos < t.size() && (t[pos] == '-' || t[pos] == '+')) text += t[pos++];
    if (!DigitPart(t, &pos, &text)) return std::nullopt;
  }
  if (pos != t.size()) return std::nullopt;
  return std::strtod(text.c_str(), nullptr);  // digits checked above; out of range: ±inf or 0
}

// int() of a finite float: its integral part, refused past 64 bits.
int64_t Truncate(double d, int line) {
  const double t = std::trunc(d);
  if (t >= 9223372036854775808.0 || t < -9223372036854775808.0)
    Fail(line, "int(): the number does not fit 64 bits");
  return static_cast<int64_t>(t);
}

void RefuseBeyondAscii(const std::string& s, const char* fn, int line) {
  for (char c : s) {
    // Python reads Unicode digits and spaces as ASCII ones; we do not know them all.
    if (static_cast<unsigned char>(c) >= 0x80)
      Fail(line, fmt::format("the {} filter of text beyond ASCII is not supported", fn));
  }
}

// round(x, ndigits) of a finite float: CPython's, through the exact decimal expansion of x
// (glibc prints a double's exact digits), rounded half to even at ndigits, read back.
double RoundFloat(double x, int64_t ndigits, int line) {
  if (!std::isfinite(x) || ndigits > 323) return x;  // CPython's NDIGITS_MAX
  if (ndigits < -308) return 0.0 * x;                // NDIGITS_MIN
  char buf[1500];
  const int len = std::snprintf(buf, sizeof buf, "%.1080f", std::fabs(x));
  std::string digits(buf, static_cast<std::size_t>(len));
  const std::size_t point = digits.find('.');
  digits.erase(point, 1);  // digits[k] has the place value 10**(point - 1 - k)
  const auto keep = static_cast<int64_t>(point) + ndigits;  // digits kept before rounding
  std::string kept = keep > 0 ? digits.substr(0, static_cast<std::size_t>(keep)) : "";
  bool up = false;
  if (keep >= 0 && keep < static_cast<int64_t>(digits.size())) {
    const char next = digits[static_cast<std::size_t>(keep)];
    const bool rest =
        digits.find_first_not_of('0', static_cast<std::size_t>(keep) + 1) != std::string::npos;
    const bool odd = !kept.empty() && (kept.back() - '0') % 2 == 1;
    up = next > '5' || (next == '5' && (rest || odd));
  }
  for (std::size_t k = kept.size(); up && k-- > 0;) {  // add one at the last kept place
    if (kept[k] == '9') {
      kept[k] = '0';
    } else {
      ++kept[k];
      up = false;
    }
  }
  if (up) kept.insert(kept.begin(), '1');
  if (kept.empty()) kept.assign(1, '0');
  // kept's last digit has the place value 10**(-ndigits).
  const std::string text = fmt::format("{}{}e{}", std::signbit(x) ? "-" : "", kept, -ndigits);
  const double r = std::strtod(text.c_str(), nullptr);
  if (std::isinf(r)) Fail(line, "rounded value too large to represent");
  return r;
}

// round(n, ndigits) of an int: unchanged for ndigits >= 0, else to a multiple of 10**-ndigits,
// ties to even.
int64_t RoundInt(int64_t n, int64_t ndigits, int line) {
  if (ndigits >= 0) return n;
  if (ndigits < -18) return 0;  // |n| < 10**19 / 2: every int64 rounds to 0
  __int128 m = 1;
  for (int64_t k = 0; k < -ndigits; ++k) m *= 10;
  __int128 q = n / m, r = n % m;
  if (r < 0) {
    r += m;
    --q;
  }
  if (2 * r > m || (2 * r == m && q % 2 != 0)) ++q;
  const __int128 v = q * m;
  if (v > INT64_MAX || v < INT64_MIN) Fail(line, "round(): the result does not fit 64 bits");
  return static_cast<int64_t>(v);
}

}  // namespace

Value IntFilter(const Value& v, const Value& dflt, const Value& base, int line) {
  if (v.is_undefined()) Fail(line, fmt::format("'{}' is undefined", *v.s));
  if (v.is_string()) {
    if (base.kind != Value::Kind::kInt || base.i != 10)
      Fail(line, "the int filter's bases other than 10 are not supported");
    RefuseBeyondAscii(*v.s, "int", line);
    const std::string_view t = StripAscii(*v.s);
    if (auto n = ParseInt(t, line)) return Value::Int(*n);
    // do_int's quirk, so that "42.23"|int gives 42: int(float(value)), its errors the default.
    const std::optional<double> d = ParseFloat(t);
    if (!d || !std::isfinite(*d)) return dflt;
    return Value::Int(Truncate(*d, line));
  }
  if (v.kind == Value::Kind::kInt || v.kind == Value::Kind::kBool)
    return Value::Int(v.kind == Value::Kind::kBool ? v.b : v.i);
  if (v.kind == Value::Kind::kFloat) {
    if (std::isnan(v.f)) return dflt;
    if (std::isinf(v.f)) Fail(line, "cannot convert float infinity to integer");
    return Value::Int(Truncate(v.f, line));
  }
  return dflt;  // int(None), int([]), ...: TypeError, the default
}

Value FloatFilter(const Value& v, const Value& dflt, int line) {
  if (v.is_undefined()) Fail(line, fmt::format("'{}' is undefined", *v.s));
  if (v.is_string()) {
    RefuseBeyondAscii(*v.s, "float", line);
    const std::optional<double> d = ParseFloat(StripAscii(*v.s));
    return d ? Value::Float(*d) : dflt;
  }
  if (v.kind == Value::Kind::kInt) return Value::Float(static_cast<double>(v.i));
  if (v.kind == Value::Kind::kBool) return Value::Float(v.b);
  if (v.kind == Value::Kind::kFloat) return v;
  return dflt;
}

Value RoundFilter(const Value& v, int64_t precision, const std::string& method, int line) {
  if (method != "common" && method != "floor" && method != "ceil")
    Fail(line, "method must be common, ceil or floor");
  if (!v.is_number())
    Fail(line, fmt::format("type {} doesn't define __round__ method", TypeName(v)));
  const bool is_int = v.kind != Value::Kind::kFloat;
  const int64_t n = v.kind == Value::Kind::kBool ? v.b : v.i;
  if (method == "common") {  // round(value, precision): an int stays an int
    return is_int ? Value::Int(RoundInt(n, precision, line))
                  : Value::Float(RoundFloat(v.f, precision, line));
  }
  // math.floor/ceil(value * 10**precision) / 10**precision. An int times 10**precision is exact,
  // so an int comes back as float(int); a float is scaled by 10.0**precision, exact up to 22.
  if (is_int && precision >= 0) return Value::Float(static_cast<double>(n));
  if (precision > 22)
    Fail(line, "round() by floor or ceil to more than 22 digits is not supported");
  const double x = is_int ? static_cast<double>(n) : v.f;
  const double m = std::pow(10.0, static_cast<double>(precision));
  const double scaled = x * m;
  if (std::isnan(scaled)) Fail(line, "cannot convert float NaN to integer");
  if (std::isinf(scaled)) Fail(line, "cannot convert float infinity to integer");
  return Value::Float((method == "floor" ? std::floor(scaled) : std::ceil(scaled)) / m);
}

}  // namespace cputrain::chat::jinja
