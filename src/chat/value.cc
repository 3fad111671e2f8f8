// Python's value semantics as a chat template sees them: str(), repr(), json.dumps (through
// transformers' tojson), ==, ordering, truthiness (jinja.h).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "chat/jinja.h"
#include "fmt/format.h"
#include "text/python_text.h"

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
Value Value::Markup(std::string s) {
  Value v = Str(std::move(s));
  v.is_markup = true;
  return v;
}

namespace {
// How deep lists and dicts nest in v (0: v is neither). A namespace counts as none: it is the one
// value that changes after it is made, so its depth is not tracked (render.cc empties every
// namespace after the rendering, which is what keeps their chains from nesting deep).
uint16_t DepthOf(const Value& v) {
  if (v.kind == Value::Kind::kList) return v.depth;
  if (v.kind == Value::Kind::kDict && !v.is_namespace) return v.dict->depth;
  return 0;
}
uint16_t OneDeeper(uint16_t d) { return d == UINT16_MAX ? d : static_cast<uint16_t>(d + 1); }
}  // namespace

Value Value::List(std::vector<Value> items, bool tuple) {
  Value v;
  v.kind = Kind::kList;
  v.is_tuple = tuple;
  uint16_t d = 0;
  for (const Value& x : items) d = std::max(d, DepthOf(x));
  v.depth = OneDeeper(d);
  v.list = std::make_shared<Items>(std::move(items));
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
  depth = std::max(depth, OneDeeper(DepthOf(v)));
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
    case Value::Kind::kList:  // a generator object is true, empty or not
      return v.is_generator() || !v.list->empty();
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
      return v.is_markup ? "Markup" : "str";
    case Value::Kind::kList:
      switch (v.view) {
        case Value::View::kKeys:
          return "dict_keys";
        case Value::View::kValues:
          return "dict_values";
        case Value::View::kItems:
          return "dict_items";
        case Value::View::kNone:
          break;
      }
      return v.is_iterator ? "generator" : v.is_tuple ? "tuple" : "list";
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
    if (digits.size() > 1) {
      out += '.';
      out.append(digits, 1);
    }
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

// Python's unicode_repr: the quote, backslash, \t \n \r and the code points str.isprintable()
// is false for escaped (\xhh up to U+00FF, \uhhhh, \Uhhhhhhhh), the rest as they are.
std::string ReprString(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const char quote = has_single && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, quote);
  for (std::size_t i = 0; i < s.size();) {
    std::size_t start = i;
    char32_t c = task::NextCodePoint(s, &i);
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (!task::PyIsPrintable(c)) {
      const auto u = static_cast<uint32_t>(c);
      out += u <= 0xff     ? fmt::format("\\x{:02x}", u)
             : u <= 0xffff ? fmt::format("\\u{:04x}", u)
                           : fmt::format("\\U{:08x}", u);
    } else {
      out.append(s, start, i - start);
    }
  }
  out += quote;
  return out;
}

// json.dumps' string: " \ and the controls escaped (\n \r \t \b \f, else \u00hh), the rest as
// it is (ensure_ascii=False). Appended after checking the size it will have.
void AppendJsonString(const std::string& s, std::string* out) {
  std::size_t n = 2;
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    n += c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t' || c == '\b' || c == '\f' ? 2
         : c < 0x20                                                                             ? 6
                                                                                                : 1;
  }
  CheckBytes(out->size() + n, "a JSON text");
  *out += '"';
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      default:
        if (c < 0x20) {
          *out += fmt::format("\\u{:04x}", c);
        } else {
          *out += ch;
        }
    }
  }
  *out += '"';
}

// repr() of values inside one another: Python's recursion guard, which prints a list or dict met
// again inside itself as [...] or {...} (only a namespace can hold itself), and a depth bound
// (Python's recursion limit, where a chain of namespaces nests deeper than values may).
class ReprWriter {
 public:
  explicit ReprWriter(std::string* out) : out_(out) {}
  void Write(const Value& v) {
    switch (v.kind) {
      case Value::Kind::kString:
        Append(v.is_markup ? "Markup(" + ReprString(*v.s) + ")" : ReprString(*v.s));
        return;
      case Value::Kind::kList:
      case Value::Kind::kDict:
        Nested(v);
        return;
      default:
        Append(v.kind == Value::Kind::kUndefined ? std::string("Undefined") : ToStr(v));
    }
  }

 private:
  void Append(const std::string& piece) {
    CheckBytes(out_->size() + piece.size(), "the text of a value");
    *out_ += piece;
  }
  void Nested(const Value& v) {
    const void* self = v.is_list() ? static_cast<const void*>(v.list.get()) : v.dict.get();
    if (v.is_generator()) {
      Fail(CurrentLine(),
           "printing a generator (the output of map, select, ...) is not supported; add | list");
    }
    const bool again = std::find(open_.begin(), open_.end(), self) != open_.end();
    if (v.is_dict() && v.is_namespace) Append("<Namespace ");
    if (again) {
      Append(v.is_list() ? "[...]" : "{...}");
    } else {
      if (open_.size() >= static_cast<std::size_t>(kMaxValueDepth)) {
        Fail(CurrentLine(), fmt::format("printing a value nested deeper than {} levels "
                                        "(Python: maximum recursion depth exceeded)",
                                        kMaxValueDepth));
      }
      open_.push_back(self);
      v.is_list() ? Items(v) : Entries(v);
      open_.pop_back();
    }
    if (v.is_dict() && v.is_namespace) Append(">");
  }
  void Items(const Value& v) {
    static const char* kViews[] = {"", "dict_keys(", "dict_values(", "dict_items("};
    Append(kViews[static_cast<int>(v.view)]);
    Append(v.is_tuple ? "(" : "[");
    for (std::size_t k = 0; k < v.list->size(); ++k) {
      if (k) Append(", ");
      Write((*v.list)[k]);
    }
    if (v.is_tuple && v.list->size() == 1) Append(",");
    Append(v.is_tuple ? ")" : "]");
    if (v.view != Value::View::kNone) Append(")");
  }
  void Entries(const Value& v) {
    Append("{");
    bool first = true;
    for (const auto& [k, item] : v.dict->items) {
      if (!first) Append(", ");
      first = false;
      Append(ReprString(k) + ": ");
      Write(item);
    }
    Append("}");
  }

  std::string* out_;
  std::vector<const void*> open_;
};

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
    case Value::Kind::kList:
    case Value::Kind::kDict: {
      std::string out;
      ReprWriter(&out).Write(v);
      return out;
    }
    case Value::Kind::kFunc:
      // Python prints most functions with their address; a macro, range, dict and namespace
      // print the same every time.
      if (v.func->repr.empty()) {
        Fail(CurrentLine(), fmt::format("printing the function '{}' is not supported (Python "
                                        "prints its address)",
                                        v.func->name));
      }
      return v.func->repr;
  }
  return "";
}

std::string ToJson(const Value& v, const std::optional<std::string>& indent,
                   const std::string& item_sep, const std::string& key_sep, bool sort_keys,
                   int line) {
  std::string out;
  // The recursion is bounded by the value's nesting (kMaxValueDepth; a namespace, the one value
  // that may nest deeper, has no JSON form).
  struct Writer {
    const std::optional<std::string>& indent;
    const std::string& item_sep;
    const std::string& key_sep;
    bool sort_keys;
    int line;
    std::string* out;
    void Append(const std::string& piece) const {
      CheckBytes(out->size() + piece.size(), "a JSON text");
      *out += piece;
    }
    void Newline(int level) const {
      if (!indent) return;
      const std::size_t n = indent->size() * static_cast<std::size_t>(level);
      CheckBytes(out->size() + 1 + n, "a JSON text");
      *out += '\n';
      for (int k = 0; k < level; ++k) *out += *indent;
    }
    void Write(const Value& v, int level) const {
      switch (v.kind) {
        case Value::Kind::kNone:
          Append("null");
          return;
        case Value::Kind::kBool:
          Append(v.b ? "true" : "false");
          return;
        case Value::Kind::kInt:
          Append(std::to_string(v.i));
          return;
        case Value::Kind::kFloat:
          Append(std::isnan(v.f)   ? "NaN"
                 : std::isinf(v.f) ? (v.f > 0 ? "Infinity" : "-Infinity")
                                   : PyFloatRepr(v.f));
          return;
        case Value::Kind::kString:
          AppendJsonString(*v.s, out);
          return;
        case Value::Kind::kList: {
          if (v.is_iterator) break;  // a generator or a dict view: not serializable
          if (v.list->empty()) {
            Append("[]");
            return;
          }
          Append("[");
          for (std::size_t k = 0; k < v.list->size(); ++k) {
            if (k) Append(item_sep);
            Newline(level + 1);
            Write((*v.list)[k], level + 1);
          }
          Newline(level);
          Append("]");
          return;
        }
        case Value::Kind::kDict: {
          if (v.is_namespace) break;
          if (v.dict->items.empty()) {
            Append("{}");
            return;
          }
          std::vector<const std::pair<std::string, Value>*> items;
          for (const auto& kv : v.dict->items) items.push_back(&kv);
          if (sort_keys) {
            std::stable_sort(items.begin(), items.end(),
                             [](auto* a, auto* b) { return a->first < b->first; });
          }
          Append("{");
          for (std::size_t k = 0; k < items.size(); ++k) {
            if (k) Append(item_sep);
            Newline(level + 1);
            AppendJsonString(items[k]->first, out);
            Append(key_sep);
            Write(items[k]->second, level + 1);
          }
          Newline(level);
          Append("}");
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
bool IsIntLike(const Value& v) {
  return v.kind == Value::Kind::kInt || v.kind == Value::Kind::kBool;
}
int64_t AsInt(const Value& v) { return v.kind == Value::Kind::kBool ? v.b : v.i; }

// Python compares an int with a float exactly (2**53 + 1 > 2.0**53): long double holds every
// int64 and every double exactly.
int CompareNumbers(const Value& a, const Value& b) {
  if (IsIntLike(a) && IsIntLike(b)) return AsInt(a) < AsInt(b) ? -1 : AsInt(a) > AsInt(b);
  const long double x = IsIntLike(a) ? static_cast<long double>(AsInt(a)) : a.f;
  const long double y = IsIntLike(b) ? static_cast<long double>(AsInt(b)) : b.f;
  return x < y ? -1 : x > y ? 1 : x == y ? 0 : 2;  // 2: unordered (NaN)
}

// dict_keys and dict_items compare as sets: the same size, each item of one in the other.
bool SameSet(const Value& a, const Value& b) {
  if (a.list->size() != b.list->size()) return false;
  return std::all_of(a.list->begin(), a.list->end(), [&](const Value& x) {
    return std::any_of(b.list->begin(), b.list->end(), [&](const Value& y) { return Equal(x, y); });
  });
}
}  // namespace

bool Equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return CompareNumbers(a, b) == 0;
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return *a.s == *b.s;
    case Value::Kind::kList:
      // The same list object is equal to itself (Python's identity shortcut); a generator or a
      // dict_values is equal to nothing else, keys and items views compare as sets.
      if (a.list == b.list) return true;
      if (a.is_iterator || b.is_iterator) {
        return a.view == b.view &&
               (a.view == Value::View::kKeys || a.view == Value::View::kItems) &&
               (Charge(Cost(a) * Cost(b)), SameSet(a, b));
      }
      if (a.is_tuple != b.is_tuple || a.list->size() != b.list->size()) return false;
      for (std::size_t k = 0; k < a.list->size(); ++k) {
        if (!Equal((*a.list)[k], (*b.list)[k])) return false;
      }
      return true;
    case Value::Kind::kDict:
      if (a.dict == b.dict) return true;
      if (a.is_namespace || b.is_namespace) return false;
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
    return CompareNumbers(a, b);
  }
  if (a.is_string() && b.is_string()) {
    int c = a.s->compare(*b.s);  // UTF-8 byte order is code point order
    return c < 0 ? -1 : c > 0;
  }
  if (a.is_sequence() && b.is_sequence() && a.is_tuple == b.is_tuple) {
    std::size_t n = std::min(a.list->size(), b.list->size());
    for (std::size_t k = 0; k < n; ++k) {
      if (Equal((*a.list)[k], (*b.list)[k])) continue;
      return Compare((*a.list)[k], (*b.list)[k], line);  // Python's: the first unequal pair
    }
    return a.list->size() < b.list->size() ? -1 : a.list->size() > b.list->size();
  }
  Fail(line, fmt::format("'<' not supported between instances of '{}' and '{}'", TypeName(a),
                         TypeName(b)));
}

std::string HtmlEscape(const std::string& s) {
  std::size_t n = s.size();
  for (char c : s) n += c == '&' || c == '<' || c == '>' ? 3 : c == '"' || c == '\'' ? 4 : 0;
  CheckBytes(n, "an escaped string");
  std::string out;
  out.reserve(n);
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

int64_t Cost(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kString:
      return 1 + static_cast<int64_t>(v.s->size()) / kBytesPerStep;
    case Value::Kind::kList:
      return 1 + static_cast<int64_t>(v.list->size());
    case Value::Kind::kDict:
      return 1 + static_cast<int64_t>(v.dict->items.size());
    default:
      return 1;
  }
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
