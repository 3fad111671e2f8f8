// Python's value semantics as a chat template sees them: str(), repr(), json.dumps (through
// transformers' tojson), ==, ordering, truthiness (jinja.h).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "chat/jinja.h"
#include "fmt/format.h"

namespace cputrain::chat::jinja {

void Fail(int line, std::string message) { throw RenderError{std::move(message), line}; }

Value Value::Undefined(std::string name) {
  Value v;
  v.s = std::make_shared<const std::string>(std::move(name));
  return v;
}
Value Value::None() {
  Value v;
  v.kind = Kind::kNone;
  return v;
}
Value Value::Bool(bool b) {
  Value v;
  v.kind = Kind::kBool;
  v.b = b;
  return v;
}
Value Value::Int(int64_t i) {
  Value v;
  v.kind = Kind::kInt;
  v.i = i;
  return v;
}
Value Value::Float(double f) {
  Value v;
  v.kind = Kind::kFloat;
  v.f = f;
  return v;
}
Value Value::Str(std::string s) {
  Value v;
  v.kind = Kind::kString;
  v.s = std::make_shared<const std::string>(std::move(s));
  return v;
}
Value Value::List(std::vector<Value> items, bool tuple) {
  Value v;
  v.kind = Kind::kList;
  v.is_tuple = tuple;
  v.list = std::make_shared<std::vector<Value>>(std::move(items));
  return v;
}
Value Value::MakeDict() {
  Value v;
  v.kind = Kind::kDict;
  v.dict = std::make_shared<Dict>();
  return v;
}
Value Value::Func(std::shared_ptr<const Callable> f) {
  Value v;
  v.kind = Kind::kFunc;
  v.func = std::move(f);
  return v;
}

const Value* Dict::Find(const std::string& key) const {
  auto it = index.find(key);
  return it == index.end() ? nullptr : &items[it->second].second;
}

void Dict::Set(const std::string& key, Value v) {
  auto it = index.find(key);
  if (it != index.end()) {
    items[it->second].second = std::move(v);
    return;
  }
  index.emplace(key, items.size());
  items.emplace_back(key, std::move(v));
}

bool Truthy(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return false;
    case Value::Kind::kBool:
      return v.b;
    case Value::Kind::kInt:
      return v.i != 0;
    case Value::Kind::kFloat:
      return v.f != 0;
    case Value::Kind::kString:
      return !v.s->empty();
    case Value::Kind::kList:
      return !v.list->empty();
    case Value::Kind::kDict:
      return v.is_namespace || !v.dict->items.empty();
    case Value::Kind::kFunc:
      return true;
  }
  return false;
}

std::string TypeName(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "NoneType";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "str";
    case Value::Kind::kList:
      return v.is_tuple ? "tuple" : "list";
    case Value::Kind::kDict:
      return v.is_namespace ? "Namespace" : "dict";
    case Value::Kind::kFunc:
      return "function";
  }
  return "?";
}

std::string PyFloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  // The shortest digits that round-trip (as Python's repr), then Python's layout: exponent form
  // when the decimal exponent is below -4 or at least 16, else positional with a ".0" if whole.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::size_t epos = sci.find('e');
  std::string mant = sci.substr(0, epos);
  int exp = std::atoi(sci.c_str() + epos + 1);
  bool neg = mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant) {
    if (c != '.') digits += c;
  }
  std::string out = neg ? "-" : "";
  if (exp < -4 || exp >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    out += fmt::format("e{}{:02d}", exp < 0 ? '-' : '+', std::abs(exp));
    return out;
  }
  if (exp < 0) {
    out += "0." + std::string(static_cast<std::size_t>(-exp - 1), '0') + digits;
  } else if (static_cast<int>(digits.size()) <= exp + 1) {
    out += digits + std::string(static_cast<std::size_t>(exp + 1) - digits.size(), '0') + ".0";
  } else {
    out += digits.substr(0, static_cast<std::size_t>(exp + 1)) + "." +
           digits.substr(static_cast<std::size_t>(exp + 1));
  }
  return out;
}

namespace {

// Decodes the code point at s[i] (advancing i); a malformed byte reads as itself (U+FFFD would
// hide it; templates' strings come from JSON and are valid).
char32_t Decode(std::string_view s, std::size_t* i) {
  unsigned char c = static_cast<unsigned char>(s[*i]);
  int n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
  if (n < 0 || *i + static_cast<std::size_t>(n) >= s.size() + (n == 0 ? 1 : 0)) {
    ++*i;
    return c;
  }
  char32_t cp = n == 0 ? c : c & (0x3F >> n);
  for (int k = 1; k <= n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[*i + k]) & 0x3F);
  *i += static_cast<std::size_t>(n) + 1;
  return cp;
}

// Python's str.isprintable() is false for these (beyond ASCII controls): C1 controls, the
// no-break and other non-space separators, format characters templates might meet.
bool PyNonPrintable(char32_t c) {
  return c < 0x20 || c == 0x7f || (c >= 0x80 && c <= 0xa0) || c == 0xad || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200f) || (c >= 0x2028 && c <= 0x202f) ||
         (c >= 0x205f && c <= 0x206f) || c == 0x3000 || c == 0xfeff ||
         (c >= 0xd800 && c <= 0xf8ff) || c == 0xfffe || c == 0xffff;
}

std::string ReprString(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const char quote = has_single && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, quote);
  for (std::size_t i = 0; i < s.size();) {
    std::size_t start = i;
    char32_t c = Decode(s, &i);
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (PyNonPrintable(c)) {
      out += c <= 0xff ? fmt::format("\\x{:02x}", static_cast<uint32_t>(c))
                       : fmt::format("\\u{:04x}", static_cast<uint32_t>(c));
    } else {
      out.append(s, start, i - start);
    }
  }
  out += quote;
  return out;
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          out += fmt::format("\\u{:04x}", c);
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

std::string ReprJoin(const Value& v) {
  std::string out;
  if (v.is_list()) {
    out = v.is_tuple ? "(" : "[";
    for (std::size_t k = 0; k < v.list->size(); ++k) {
      if (k) out += ", ";
      out += Repr((*v.list)[k]);
    }
    if (v.is_tuple && v.list->size() == 1) out += ",";
    return out + (v.is_tuple ? ")" : "]");
  }
  out = v.is_namespace ? "<Namespace {" : "{";
  bool first = true;
  for (const auto& [k, item] : v.dict->items) {
    if (!first) out += ", ";
    first = false;
    out += ReprString(k);
    out += ": ";
    out += Repr(item);
  }
  return out + (v.is_namespace ? "}>" : "}");
}

}  // namespace

std::string ToStr(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kString:
      return *v.s;
    default:
      return Repr(v);
  }
}

std::string Repr(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return v.b ? "True" : "False";
    case Value::Kind::kInt:
      return std::to_string(v.i);
    case Value::Kind::kFloat:
      return PyFloatRepr(v.f);
    case Value::Kind::kString:
      return ReprString(*v.s);
    case Value::Kind::kList:
    case Value::Kind::kDict:
      return ReprJoin(v);
    case Value::Kind::kFunc:
      return fmt::format("<function {}>", v.func->name);
  }
  return "";
}

std::string ToJson(const Value& v, int indent, const std::string& item_sep,
                   const std::string& key_sep, bool sort_keys, int line) {
  std::string out;
  // Iterative depth is bounded by the value's own nesting (JSON input is depth-limited).
  struct Writer {
    int indent;
    const std::string& item_sep;
    const std::string& key_sep;
    bool sort_keys;
    int line;
    std::string* out;
    void Newline(int level) const {
      if (indent < 0) return;
      *out += '\n';
      out->append(static_cast<std::size_t>(indent * level), ' ');
    }
    void Write(const Value& v, int level) const {
      switch (v.kind) {
        case Value::Kind::kNone:
          *out += "null";
          return;
        case Value::Kind::kBool:
          *out += v.b ? "true" : "false";
          return;
        case Value::Kind::kInt:
          *out += std::to_string(v.i);
          return;
        case Value::Kind::kFloat:
          *out += std::isnan(v.f)   ? "NaN"
                  : std::isinf(v.f) ? (v.f > 0 ? "Infinity" : "-Infinity")
                                    : PyFloatRepr(v.f);
          return;
        case Value::Kind::kString:
          *out += JsonString(*v.s);
          return;
        case Value::Kind::kList: {
          if (v.list->empty()) {
            *out += "[]";
            return;
          }
          *out += '[';
          for (std::size_t k = 0; k < v.list->size(); ++k) {
            if (k) *out += item_sep;
            Newline(level + 1);
            Write((*v.list)[k], level + 1);
          }
          Newline(level);
          *out += ']';
          return;
        }
        case Value::Kind::kDict: {
          if (v.is_namespace) break;
          if (v.dict->items.empty()) {
            *out += "{}";
            return;
          }
          std::vector<const std::pair<std::string, Value>*> items;
          for (const auto& kv : v.dict->items) items.push_back(&kv);
          if (sort_keys) {
            std::stable_sort(items.begin(), items.end(),
                             [](auto* a, auto* b) { return a->first < b->first; });
          }
          *out += '{';
          for (std::size_t k = 0; k < items.size(); ++k) {
            if (k) *out += item_sep;
            Newline(level + 1);
            *out += JsonString(items[k]->first) + key_sep;
            Write(items[k]->second, level + 1);
          }
          Newline(level);
          *out += '}';
          return;
        }
        default:
          break;
      }
      Fail(line, fmt::format("Object of type {} is not JSON serializable", TypeName(v)));
    }
  };
  Writer{indent, item_sep, key_sep, sort_keys, line, &out}.Write(v, 0);
  return out;
}

namespace {
double AsDouble(const Value& v) {
  return v.kind == Value::Kind::kFloat
             ? v.f
             : static_cast<double>(v.kind == Value::Kind::kBool ? v.b : v.i);
}
bool IsIntLike(const Value& v) {
  return v.kind == Value::Kind::kInt || v.kind == Value::Kind::kBool;
}
int64_t AsInt(const Value& v) { return v.kind == Value::Kind::kBool ? v.b : v.i; }
}  // namespace

bool Equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (IsIntLike(a) && IsIntLike(b)) return AsInt(a) == AsInt(b);
    return AsDouble(a) == AsDouble(b);
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return *a.s == *b.s;
    case Value::Kind::kList:
      if (a.is_tuple != b.is_tuple || a.list->size() != b.list->size()) return false;
      for (std::size_t k = 0; k < a.list->size(); ++k) {
        if (!Equal((*a.list)[k], (*b.list)[k])) return false;
      }
      return true;
    case Value::Kind::kDict:
      if (a.is_namespace || b.is_namespace) return a.dict == b.dict;
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& [k, v] : a.dict->items) {
        const Value* o = b.dict->Find(k);
        if (o == nullptr || !Equal(v, *o)) return false;
      }
      return true;
    case Value::Kind::kFunc:
      return a.func == b.func;
    default:
      return false;
  }
}

int Compare(const Value& a, const Value& b, int line) {
  if (a.is_number() && b.is_number()) {
    if (IsIntLike(a) && IsIntLike(b)) return AsInt(a) < AsInt(b) ? -1 : AsInt(a) > AsInt(b);
    double x = AsDouble(a), y = AsDouble(b);
    return x < y ? -1 : x > y;
  }
  if (a.is_string() && b.is_string()) {
    int c = a.s->compare(*b.s);  // UTF-8 byte order is code point order
    return c < 0 ? -1 : c > 0;
  }
  if (a.is_list() && b.is_list() && a.is_tuple == b.is_tuple) {
    std::size_t n = std::min(a.list->size(), b.list->size());
    for (std::size_t k = 0; k < n; ++k) {
      if (Equal((*a.list)[k], (*b.list)[k])) continue;
      return Compare((*a.list)[k], (*b.list)[k], line);
    }
    return a.list->size() < b.list->size() ? -1 : a.list->size() > b.list->size();
  }
  Fail(line, fmt::format("'<' not supported between instances of '{}' and '{}'", TypeName(a),
                         TypeName(b)));
}

std::size_t Utf8Length(std::string_view s) {
  std::size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

std::vector<std::size_t> CodePointStarts(std::string_view s) {
  std::vector<std::size_t> starts;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) starts.push_back(i);
  }
  starts.push_back(s.size());
  return starts;
}

}  // namespace cputrain::chat::jinja
