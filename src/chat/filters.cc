// Jinja2's builtin filters and tests, and the globals of transformers' environment (jinja.h).
// A filter or test that Jinja2 has and we do not is refused when the template is parsed
// (KnownFilter/KnownTest false), naming it.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <functional>
#include <map>
#include <string>
#include <unordered_set>

#include "chat/jinja.h"
#include "fmt/format.h"
#include "text/python_text.h"

namespace cputrain::chat::jinja {
namespace {

int64_t IntArg(const Value& v, const char* fn, int line) {
  if (v.kind == Value::Kind::kInt) return v.i;
  if (v.kind == Value::Kind::kBool) return v.b;
  Fail(line, fmt::format("{}: expected an integer, got {}", fn, TypeName(v)));
}

// The named parameters of a filter after its subject: positional, then keywords, else defaults.
std::vector<Value> Bind(const char* fn, Args& args, std::vector<std::pair<const char*, Value>> spec,
                        int line) {
  if (args.pos.size() > spec.size())
    Fail(line, fmt::format("the {} filter takes at most {} arguments", fn, spec.size()));
  std::vector<Value> out;
  for (std::size_t k = 0; k < spec.size(); ++k)
    out.push_back(k < args.pos.size() ? args.pos[k] : spec[k].second);
  for (auto& [name, v] : args.kw) {
    std::size_t k = 0;
    while (k < spec.size() && name != spec[k].first) ++k;
    if (k == spec.size())
      Fail(line, fmt::format("the {} filter got an unexpected keyword argument '{}'", fn, name));
    out[k] = v;
  }
  return out;
}

// Jinja2's make_attrgetter: "a.b.0" looks up item by item (getitem, which falls back to getattr);
// a default (map's, when not None) replaces an undefined part before the next is looked up.
Value AttrPath(const Value& item, const std::string& path, int line, const Value* def = nullptr) {
  Value v = item;
  std::size_t start = 0;
  for (;;) {
    std::size_t dot = path.find('.', start);
    std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(),
                                               [](char c) { return c >= '0' && c <= '9'; });
    v = GetItem(v, digits && part.size() < 18 ? Value::Int(std::stoll(part)) : Value::Str(part),
                line);
    if (def != nullptr && !def->is_none() && v.is_undefined()) v = *def;
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

Value Iterator(std::vector<Value> items) {
  Value v = Value::List(std::move(items));
  v.is_iterator = true;
  return v;
}

// A str filter's result: Markup where its value was Markup (soft_str keeps it, and Markup's
// methods return Markup), else a plain str.
Value Soft(const Value& v, std::string text) {
  Value out = Value::Str(std::move(text));
  out.is_markup = v.is_string() && v.is_markup;
  return out;
}

std::size_t Length(const Value& v, int line) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return Utf8Length(*v.s);
    case Value::Kind::kList:
      if (v.is_generator())
        Fail(line, "object of type 'generator' has no len() (add | list before | length)");
      return v.list->size();
    case Value::Kind::kDict:
      if (!v.is_namespace) return v.dict->items.size();
      break;
    default:
      break;
  }
  Fail(line, fmt::format("object of type '{}' has no len()", TypeName(v)));
}

// Case-insensitive sort key of min, max, sort, unique, dictsort (Jinja2's ignore_case).
Value SortKey(const Value& v, bool case_sensitive) {
  return !case_sensitive && v.is_string() ? Value::Str(task::PyLower(*v.s)) : v;
}

std::string EnsureAscii(const std::string& json) {
  std::string out;
  for (std::size_t i = 0; i < json.size();) {
    if (out.size() + 12 > json.size()) CheckBytes(out.size() + 12, "a JSON text");
    if (static_cast<unsigned char>(json[i]) < 0x80) {
      out += json[i++];
      continue;
    }
    char32_t c = task::NextCodePoint(json, &i);
    if (c >= 0x10000) {
      c -= 0x10000;
      out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (c >> 10), 0xDC00 + (c & 0x3FF));
    } else {
      out += fmt::format("\\u{:04x}", static_cast<uint32_t>(c));
    }
  }
  return out;
}

Value ToJsonFilter(const Value& v, Args& args, int line) {
  auto p = Bind("tojson", args,
                {{"ensure_ascii", Value::Bool(false)},
                 {"indent", Value::None()},
                 {"separators", Value::None()},
                 {"sort_keys", Value::Bool(false)}},
                line);
  // json.dumps' indent: a str is one level's text, an int that many spaces (none below 1).
  std::optional<std::string> indent;
  if (p[1].is_string()) {
    indent = *p[1].s;
  } else if (!p[1].is_none()) {
    const int64_t n = std::max<int64_t>(IntArg(p[1], "tojson indent", line), 0);
    CheckBytes(static_cast<std::size_t>(n), "tojson's indent");
    indent = std::string(static_cast<std::size_t>(n), ' ');
  }
  std::string item_sep = indent ? "," : ", ", key_sep = ": ";
  if (!p[2].is_none()) {
    if (!p[2].is_list() || p[2].list->size() != 2 || !(*p[2].list)[0].is_string() ||
        !(*p[2].list)[1].is_string()) {
      Fail(line, "tojson: separators must be a pair of strings");
    }
    item_sep = *(*p[2].list)[0].s;
    key_sep = *(*p[2].list)[1].s;
  }
  std::string out = ToJson(v, indent, item_sep, key_sep, Truthy(p[3]), line);
  return Value::Str(Truthy(p[0]) ? EnsureAscii(out) : out);
}

// Jinja2's do_indent. A Markup's indentation is escaped (Markup + str escapes the str).
std::string Indent(const std::string& s, const Value& width, bool first, bool blank, bool markup,
                   int line) {
  std::string ind;
  if (width.is_string()) {
    ind = markup && !width.is_markup ? HtmlEscape(*width.s) : *width.s;
  } else {
    const int64_t n = std::max<int64_t>(IntArg(width, "indent", line), 0);
    CheckBytes(static_cast<std::size_t>(n), "indent's width");
    ind.assign(static_cast<std::size_t>(n), ' ');
  }
  // Jinja2 appends "\n" before splitlines() so a trailing newline keeps an empty last line.
  // Each line [begin, end) of that text goes to `line_fn`, without holding them all.
  const std::string text = s + "\n";
  auto each_line = [&](auto&& line_fn) {
    std::size_t start = 0, i = 0, k = 0;
    while (i < text.size()) {
      std::size_t at = i;
      char32_t c = task::NextCodePoint(text, &i);
      bool brk = c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || (c >= 0x1c && c <= 0x1e) ||
                 c == 0x85 || c == 0x2028 || c == 0x2029;
      if (!brk) continue;
      line_fn(k++, start, at);
      if (c == '\r' && i < text.size() && text[i] == '\n') ++i;
      start = i;
    }
    if (start < text.size()) line_fn(k, start, text.size());
  };
  auto indented = [&](std::size_t k, std::size_t b, std::size_t e) {
    return k > 0 && (blank || e > b);
  };
  std::size_t n = first ? ind.size() : 0;
  each_line([&](std::size_t k, std::size_t b, std::size_t e) {
    n += (k ? 1 : 0) + (indented(k, b, e) ? ind.size() : 0) + (e - b);
  });
  CheckBytes(n, "an indented string");
  std::string rv = first ? ind : "";
  rv.reserve(n);
  each_line([&](std::size_t k, std::size_t b, std::size_t e) {
    if (k) rv += "\n";
    if (indented(k, b, e)) rv += ind;
    rv.append(text, b, e - b);
  });
  return rv;
}

// Jinja2's title filter (not str.title): each piece between runs of - whitespace ( { [ < gets
// its first character upper-cased and the rest lower-cased.
std::string JinjaTitle(const std::string& s, int line) {
  if (!std::all_of(s.begin(), s.end(),
                   [](char c) { return static_cast<unsigned char>(c) < 0x80; })) {
    Fail(line, "the title filter on text beyond ASCII is not supported");
  }
  std::string out = s;
  bool start = true;
  for (char& c : out) {
    bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || c == ' ' ||
               (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
    if (sep) {
      start = true;
      continue;
    }
    c = static_cast<char>(start ? std::toupper(static_cast<unsigned char>(c))
                                : std::tolower(static_cast<unsigned char>(c)));
    start = false;
  }
  return out;
}

using FilterFn = std::function<Value(const Value&, Args&, int)>;

// A generator made from a generator: Python's reads its source only as it is itself read, so
// the source is left partly used (a later use of it refused).
Value Derived(const Value& source, std::vector<Value> items) {
  UsedPartly(source);
  return Iterator(std::move(items));
}

Value Select(const Value& v, Args& args, int line, bool attr, bool keep) {
  std::vector<Value> out;
  // Jinja2's select_or_reject starts with `if value:`: None, an empty or undefined value and
  // any other false one give no items (and their arguments are not looked at).
  if (!Truthy(v)) return Iterator({});
  if (attr && args.pos.empty()) Fail(line, "selectattr/rejectattr need an attribute name");
  if (attr && !args.pos[0].is_string())
    Fail(line, "selectattr/rejectattr: the attribute must be a string");
  std::string path = attr ? *args.pos[0].s : "";
  std::size_t first = attr ? 1 : 0;
  std::string test;
  Args targs;
  if (args.pos.size() > first) {
    if (!args.pos[first].is_string()) Fail(line, "select: the test must be named by a string");
    test = *args.pos[first].s;
    if (!KnownTest(test)) Fail(line, fmt::format("the test '{}' is not supported", test));
    targs.pos.assign(args.pos.begin() + static_cast<std::ptrdiff_t>(first + 1), args.pos.end());
  }
  for (const Value& item : Iterate(v, line)) {
    Value x = attr ? AttrPath(item, path, line) : item;
    bool pass = test.empty() ? Truthy(x) : ApplyTest(test, x, targs, line);
    if (pass == keep) out.push_back(item);
  }
  return Derived(v, std::move(out));
}

Value Map(const Value& v, Args& args, int line) {
  std::vector<Value> out;
  if (!Truthy(v)) return Iterator({});  // sync_do_map's `if value:`, as select's
  const Value* attribute = nullptr;
  const Value* def = nullptr;
  for (auto& [k, x] : args.kw) {
    if (k == "attribute")
      attribute = &x;
    else if (k == "default")
      def = &x;
  }
  if (attribute) {
    if (!attribute->is_string()) Fail(line, "map: attribute must be a string");
    for (const Value& item : Iterate(v, line))
      out.push_back(AttrPath(item, *attribute->s, line, def));
    return Derived(v, std::move(out));
  }
  if (args.pos.empty() || !args.pos[0].is_string())
    Fail(line, "map needs a filter name or attribute=");
  std::string f = *args.pos[0].s;
  if (!KnownFilter(f)) Fail(line, fmt::format("the filter '{}' is not supported", f));
  Args fargs;
  fargs.pos.assign(args.pos.begin() + 1, args.pos.end());
  fargs.kw = args.kw;
  for (const Value& item : Iterate(v, line)) {
    Args a = fargs;
    out.push_back(ApplyFilter(f, item, a, line));
  }
  return Derived(v, std::move(out));
}

Value Slice(const Value& v, Args& args, int line) {
  // Python's slice semantics over a list or a str's code points.
  std::vector<Value> items;
  const bool is_str = v.is_string();
  if (is_str) {
    items = Iterate(v, line);
  } else if (v.is_list() && !v.is_iterator) {
    items = *v.list;
  } else {
    Fail(line, fmt::format("'{}' object is not subscriptable", TypeName(v)));
  }
  const int64_t n = static_cast<int64_t>(items.size());
  int64_t step = args.pos[2].is_none() ? 1 : IntArg(args.pos[2], "slice", line);
  if (step == 0) Fail(line, "slice step cannot be zero");
  auto norm = [&](const Value& x, int64_t def) {
    if (x.is_none()) return def;
    int64_t i = IntArg(x, "slice", line);
    if (i < 0) i += n;
    return step > 0 ? std::clamp<int64_t>(i, 0, n) : std::clamp<int64_t>(i, -1, n - 1);
  };
  int64_t start = norm(args.pos[0], step > 0 ? 0 : n - 1);
  int64_t stop = norm(args.pos[1], step > 0 ? n : -1);
  std::vector<Value> out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
    out.push_back(items[static_cast<std::size_t>(i)]);
  if (!is_str) return Value::List(std::move(out), v.is_tuple);
  std::string s;
  for (const Value& c : out) s += *c.s;
  return Soft(v, std::move(s));  // Markup's __getitem__ gives Markup
}

Value SortLike(const char* fn, const Value& v, Args& args, int line) {
  const std::string name = fn;
  auto p = name == "dictsort" ? Bind(fn, args,
                                     {{"case_sensitive", Value::Bool(false)},
                                      {"by", Value::Str("key")},
                                      {"reverse", Value::Bool(false)}},
                                     line)
                              : Bind(fn, args,
                                     {{"reverse", Value::Bool(false)},
                                      {"case_sensitive", Value::Bool(false)},
                                      {"attribute", Value::None()}},
                                     line);
  std::vector<Value> items;
  bool cs;
  std::function<Value(const Value&)> key;
  if (name == "dictsort") {
    if (!v.is_dict()) Fail(line, "dictsort needs a dict");
    for (const auto& [k, x] : v.dict->items) items.push_back(Value::List({Value::Str(k), x}, true));
    cs = Truthy(p[0]);
    int pos = p[1].is_string() && *p[1].s == "value" ? 1 : 0;
    key = [pos](const Value& x) { return (*x.list)[static_cast<std::size_t>(pos)]; };
    std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
      return Compare(SortKey(key(a), cs), SortKey(key(b), cs), line) == -1;
    });
    if (Truthy(p[2])) std::reverse(items.begin(), items.end());
    return Value::List(std::move(items));
  }
  items = Iterate(v, line);
  cs = Truthy(p[1]);
  std::string attr = p[2].is_string() ? *p[2].s : "";
  key = [&](const Value& x) { return attr.empty() ? x : AttrPath(x, attr, line); };
  bool rev = Truthy(p[0]);
  Charge(Cost(v) * 20);  // n log n comparisons
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    int c = Compare(SortKey(key(a), cs), SortKey(key(b), cs), line);
    return rev ? c == 1 : c == -1;
  });
  return Value::List(std::move(items));
}

Value MinMax(bool max, const Value& v, Args& args, int line) {
  auto p = Bind(max ? "max" : "min", args,
                {{"case_sensitive", Value::Bool(false)}, {"attribute", Value::None()}}, line);
  std::vector<Value> items = Iterate(v, line);
  if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
  std::string attr = p[1].is_string() ? *p[1].s : "";
  const Value* best = &items[0];
  for (const Value& x : items) {
    Value a = SortKey(attr.empty() ? x : AttrPath(x, attr, line), Truthy(p[0]));
    Value b = SortKey(attr.empty() ? *best : AttrPath(*best, attr, line), Truthy(p[0]));
    int c = Compare(a, b, line);
    if (max ? c == 1 : c == -1) best = &x;
  }
  return *best;
}

// str.center(width) of soft_str(value): the odd space on the left when width is odd.
Value Center(const Value& v, Args& a, int line) {
  auto p = Bind("center", a, {{"width", Value::Int(80)}}, line);
  const std::string s = ToStr(v);
  const int64_t w = IntArg(p[0], "center", line);
  const auto len = static_cast<int64_t>(Utf8Length(s));
  if (w <= len) return Soft(v, s);
  const int64_t pad = w - len, left = pad / 2 + (pad & w & 1);
  CheckBytes(s.size() + static_cast<std::size_t>(pad), "a centered string");
  return Soft(v, std::string(static_cast<std::size_t>(left), ' ') + s +
                     std::string(static_cast<std::size_t>(pad - left), ' '));
}

// do_reverse: a str backwards (code points); reversed() of what has it (a list, a tuple, a dict's
// keys, a view), read lazily; else list(value) reversed (a generator, consumed).
Value Reverse(const Value& v, int line) {
  if (v.is_string()) {
    std::vector<std::string> chars;
    for (const Value& c : Iterate(v, line)) chars.push_back(*c.s);
    std::string out;
    out.reserve(v.s->size());
    for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += *it;
    return Soft(v, std::move(out));
  }
  const bool reversible = v.is_sequence() || (v.is_list() && v.view != Value::View::kNone) ||
                          (v.is_dict() && !v.is_namespace);
  if (!reversible && !v.is_generator())
    Fail(line, fmt::format("reversing a value of type '{}' is not supported", TypeName(v)));
  std::vector<Value> items = Iterate(v, line);
  std::reverse(items.begin(), items.end());
  return v.is_generator() ? Value::List(std::move(items)) : Iterator(std::move(items));
}

// The key of v in a Python set: values Python finds equal (1, 1.0, True; a Markup and its str)
// get one key; an unhashable value (a list, a dict) is refused as Python refuses it.
void HashKey(const Value& v, int line, std::string* out) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      *out += 'U';  // Jinja2's Undefined objects are all equal
      return;
    case Value::Kind::kNone:
      *out += 'N';
      return;
    case Value::Kind::kBool:
    case Value::Kind::kInt:
      *out += fmt::format("i{};", v.kind == Value::Kind::kBool ? v.b : v.i);
      return;
    case Value::Kind::kFloat:
      if (std::isnan(v.f))
        Fail(line, "unique of NaN values is not supported (Python tells NaNs apart by identity)");
      if (v.f == std::trunc(v.f) && std::fabs(v.f) < 9.2e18) {
        *out += fmt::format("i{};", static_cast<int64_t>(v.f));
      } else {
        *out += "f" + PyFloatRepr(v.f) + ";";
      }
      return;
    case Value::Kind::kString:
      *out += fmt::format("s{}:", v.s->size()) + *v.s;
      return;
    case Value::Kind::kList:
      if (!v.is_tuple || v.is_iterator) break;
      *out += '(';
      for (const Value& x : *v.list) HashKey(x, line, out);
      *out += ')';
      return;
    case Value::Kind::kDict:
      if (!v.is_namespace) break;
      *out += fmt::format("n{};", static_cast<const void*>(v.dict.get()));  // by identity
      return;
    case Value::Kind::kFunc:
      *out += fmt::format("F{};", static_cast<const void*>(v.func.get()));
      return;
  }
  Fail(line, fmt::format("unhashable type: '{}'", TypeName(v)));
}

// do_unique: the first item of each key (case-folded unless case_sensitive), lazily.
Value Unique(const Value& v, Args& a, int line) {
  auto p = Bind("unique", a, {{"case_sensitive", Value::Bool(false)}, {"attribute", Value::None()}},
                line);
  const bool cs = Truthy(p[0]);
  const std::string attr = p[1].is_string() ? *p[1].s : "";
  std::unordered_set<std::string> seen;
  std::vector<Value> out;
  for (const Value& x : Iterate(v, line)) {
    std::string key;
    HashKey(SortKey(attr.empty() ? x : AttrPath(x, attr, line), cs), line, &key);
    if (seen.insert(std::move(key)).second) out.push_back(x);
  }
  return Derived(v, std::move(out));
}

const std::map<std::string, FilterFn>& FirstFilters() {
  static const std::map<std::string, FilterFn> k = {
      {"abs",
       [](const Value& v, Args&, int line) {
         if (!v.is_number())
           Fail(line, fmt::format("bad operand type for abs(): '{}'", TypeName(v)));
         if (v.kind == Value::Kind::kInt && v.i == INT64_MIN)
           Fail(line, "abs(): the result does not fit 64 bits");
         return v.kind == Value::Kind::kFloat
                    ? Value::Float(std::fabs(v.f))
                    : Value::Int(std::llabs(v.kind == Value::Kind::kBool ? v.b : v.i));
       }},
      {"capitalize",
       [](const Value& v, Args&, int) { return Soft(v, task::PyCapitalize(ToStr(v))); }},
      {"center", [](const Value& v, Args& a, int line) { return Center(v, a, line); }},
      {"default",
       [](const Value& v, Args& a, int line) {
         auto p = Bind("default", a,
                       {{"default_value", Value::Str("")}, {"boolean", Value::Bool(false)}}, line);
         return v.is_undefined() || (Truthy(p[1]) && !Truthy(v)) ? p[0] : v;
       }},
      {"dictsort",
       [](const Value& v, Args& a, int line) { return SortLike("dictsort", v, a, line); }},
      // markupsafe's escape(): a Markup as it is, anything else escaped into one.
      {"escape",
       [](const Value& v, Args&, int) {
         return v.is_string() && v.is_markup ? v : Value::Markup(HtmlEscape(ToStr(v)));
       }},
      {"first",
       [](const Value& v, Args&, int line) {
         std::vector<Value> items = Iterate(v, line);
         if (items.size() > 1) UsedPartly(v);  // next(iter(seq)) takes one item
         return items.empty() ? Value::Undefined("No first item, sequence was empty.") : items[0];
       }},
      {"float",
       [](const Value& v, Args& a, int line) {
         auto p = Bind("float", a, {{"default", Value::Float(0)}}, line);
         return FloatFilter(v, p[0], line);
       }},
      {"indent",
       [](const Value& v, Args& a, int line) {
         auto p = Bind("indent", a,
                       {{"width", Value::Int(4)},
                        {"first", Value::Bool(false)},
                        {"blank", Value::Bool(false)}},
                       line);
         // do_indent adds "\n" to its value: a str (a Markup stays one), nothing else.
         if (v.is_undefined()) Fail(line, fmt::format("'{}' is undefined", *v.s));
         if (!v.is_string())
           Fail(line,
                fmt::format("unsupported operand type(s) for +=: '{}' and 'str'", TypeName(v)));
         return Soft(v, Indent(*v.s, p[0], Truthy(p[1]), Truthy(p[2]), v.is_markup, line));
       }},
      {"int",
       [](const Value& v, Args& a, int line) {
         auto p = Bind("int", a, {{"default", Value::Int(0)}, {"base", Value::Int(10)}}, line);
         return IntFilter(v, p[0], p[1], line);
       }},
      {"items",
       [](const Value& v, Args&, int line) {
         if (v.is_undefined()) return Iterator({});
         if (!v.is_dict() || v.is_namespace)
           Fail(line, fmt::format("Can only get item pairs from a mapping, not {}", TypeName(v)));
         std::vector<Value> out;
         for (const auto& [k, x] : v.dict->items)
           out.push_back(Value::List({Value::Str(k), x}, true));
         return Iterator(std::move(out));
       }},
      {"join",
       [](const Value& v, Args& a, int line) {
         auto p = Bind("join", a, {{"d", Value::Str("")}, {"attribute", Value::None()}}, line);
         // str(d).join(map(str, value)), a plain str whatever the items were.
         const std::string sep = ToStr(p[0]);
         std::vector<std::string> parts;
         std::size_t n = 0;
         for (const Value& x : Iterate(v, line)) {
           parts.push_back(ToStr(p[1].is_string() ? AttrPath(x, *p[1].s, line) : x));
           n += parts.back().size() + (parts.size() > 1 ? sep.size() : 0);
           CheckBytes(n, "a joined string");
         }
         std::string out;
         out.reserve(n);
         for (std::size_t k = 0; k < parts.size(); ++k) out += (k ? sep : "") + parts[k];
         return Value::Str(std::move(out));
       }},
  };
  return k;
}

// sum(attribute=None, start=0): Python's sum, ints staying ints.
Value SumFilter(const Value& v, Args& a, int line) {
  auto p = Bind("sum", a, {{"attribute", Value::None()}, {"start", Value::Int(0)}}, line);
  Value total = p[1];
  for (const Value& x : Iterate(v, line)) {
    Value y = p[0].is_string() ? AttrPath(x, *p[0].s, line) : x;
    if (!total.is_number() || !y.is_number()) Fail(line, "sum of values that are not numbers");
    bool ints = total.kind != Value::Kind::kFloat && y.kind != Value::Kind::kFloat;
    auto num = [](const Value& n) {
      return n.kind == Value::Kind::kFloat
                 ? n.f
                 : static_cast<double>(n.kind == Value::Kind::kBool ? n.b : n.i);
    };
    if (ints) {
      const __int128 t = __int128{total.kind == Value::Kind::kBool ? total.b : total.i} +
                         (y.kind == Value::Kind::kBool ? y.b : y.i);
      if (t > INT64_MAX || t < INT64_MIN) Fail(line, "sum(): the total does not fit 64 bits");
      total = Value::Int(static_cast<int64_t>(t));
    } else {
      total = Value::Float(num(total) + num(y));
    }
  }
  return total;
}

// The second half of the table (Filters() joins both).
const std::map<std::string, FilterFn>& MoreFilters() {
  static const std::map<std::string, FilterFn> k = {
      {"last",
       [](const Value& v, Args&, int line) {
         if (v.is_generator()) Fail(line, "'generator' object is not reversible");
         std::vector<Value> items = Iterate(v, line);
         return items.empty() ? Value::Undefined("No last item, sequence was empty.")
                              : items.back();
       }},
      {"length", [](const Value& v, Args&,
                    int line) { return Value::Int(static_cast<int64_t>(Length(v, line))); }},
      {"list", [](const Value& v, Args&, int line) { return Value::List(Iterate(v, line)); }},
      {"lower", [](const Value& v, Args&, int) { return Soft(v, task::PyLower(ToStr(v))); }},
      {"map", [](const Value& v, Args& a, int line) { return Map(v, a, line); }},
      {"max", [](const Value& v, Args& a, int line) { return MinMax(true, v, a, line); }},
      {"min", [](const Value& v, Args& a, int line) { return MinMax(false, v, a, line); }},
      {"reject",
       [](const Value& v, Args& a, int line) { return Select(v, a, line, false, false); }},
      {"rejectattr",
       [](const Value& v, Args& a, int line) { return Select(v, a, line, true, false); }},
      {"replace",
       [](const Value& v, Args& a, int line) {
         Args m;
         m.pos = a.pos;
         if (!a.kw.empty()) {
           auto p = Bind("replace", a,
                         {{"old", Value::Undefined()},
                          {"new", Value::Undefined()},
                          {"count", Value::Int(-1)}},
                         line);
           m.pos = p;
         }
         if (m.pos.size() == 3 && m.pos[2].is_none()) m.pos.pop_back();
         return CallStrMethod(ToStr(v), "replace", m, line);
       }},
      {"reverse", [](const Value& v, Args&, int line) { return Reverse(v, line); }},
      {"round",
       [](const Value& v, Args& a, int line) {
         auto p = Bind("round", a, {{"precision", Value::Int(0)}, {"method", Value::Str("common")}},
                       line);
         return RoundFilter(v, IntArg(p[0], "round", line), p[1].is_string() ? *p[1].s : "", line);
       }},
      {"safe",  // Markup(value): str() of it, marked safe
       [](const Value& v, Args&, int) {
         return v.is_string() && v.is_markup ? v : Value::Markup(ToStr(v));
       }},
      {"select", [](const Value& v, Args& a, int line) { return Select(v, a, line, false, true); }},
      {"selectattr",
       [](const Value& v, Args& a, int line) { return Select(v, a, line, true, true); }},
      {"sort", [](const Value& v, Args& a, int line) { return SortLike("sort", v, a, line); }},
      {"string", [](const Value& v, Args&, int) { return Soft(v, ToStr(v)); }},
      {"sum", [](const Value& v, Args& a, int line) { return SumFilter(v, a, line); }},
      {"title",
       [](const Value& v, Args&, int line) { return Value::Str(JinjaTitle(ToStr(v), line)); }},
      {"tojson", [](const Value& v, Args& a, int line) { return ToJsonFilter(v, a, line); }},
      {"trim",
       [](const Value& v, Args& a, int line) {
         auto p = Bind("trim", a, {{"chars", Value::None()}}, line);
         Args s;
         s.pos.push_back(p[0]);
         return Soft(v, *CallStrMethod(ToStr(v), "strip", s, line).s);
       }},
      {"unique", [](const Value& v, Args& a, int line) { return Unique(v, a, line); }},
      {"upper",
       [](const Value& v, Args&, int line) {
         Args none;
         return Soft(v, *CallStrMethod(ToStr(v), "upper", none, line).s);
       }},
      {"wordcount",
       [](const Value& v, Args&, int) {
         std::string s = ToStr(v);
         int64_t n = 0;
         bool in = false;
         for (std::size_t i = 0; i < s.size();) {
           bool w = task::PyIsWord(task::NextCodePoint(s, &i));
           n += w && !in;
           in = w;
         }
         return Value::Int(n);
       }},
      {"__slice__", [](const Value& v, Args& a, int line) { return Slice(v, a, line); }},
  };
  return k;
}

const std::map<std::string, FilterFn>& Filters() {
  static const std::map<std::string, FilterFn> k = [] {
    std::map<std::string, FilterFn> all = FirstFilters();
    all.insert(MoreFilters().begin(), MoreFilters().end());
    return all;
  }();
  return k;
}

const std::map<std::string, std::string>& FilterAliases() {
  static const std::map<std::string, std::string> k = {
      {"d", "default"}, {"e", "escape"}, {"count", "length"}};
  return k;
}

std::string Canonical(const std::string& name) {
  auto it = FilterAliases().find(name);
  return it == FilterAliases().end() ? name : it->second;
}

using TestFn = std::function<bool(const Value&, Args&, int)>;

// str(value) for the lower and upper tests (str.islower()/isupper()), whose cased letters beyond
// ASCII we do not know: refused there.
std::string AsciiText(const Value& v, const char* test, int line) {
  std::string s = ToStr(v);
  if (std::any_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) >= 0x80; }))
    Fail(line, fmt::format("the test '{}' of text beyond ASCII is not supported", test));
  return s;
}

bool CompareTest(const char* op, const Value& v, Args& a, int line) {
  if (a.pos.size() != 1) Fail(line, fmt::format("the test '{}' takes one argument", op));
  const Value& o = a.pos[0];
  std::string s = op;
  if (s == "eq") return Equal(v, o);
  if (s == "ne") return !Equal(v, o);
  const int c = Compare(v, o, line);  // 2: unordered (a NaN): every test false
  return s == "lt"   ? c == -1
         : s == "le" ? c == -1 || c == 0
         : s == "gt" ? c == 1
                     : c == 1 || c == 0;
}

const std::map<std::string, TestFn>& Tests() {
  using K = Value::Kind;
  static const std::map<std::string, TestFn> k = {
      {"defined", [](const Value& v, Args&, int) { return !v.is_undefined(); }},
      {"undefined", [](const Value& v, Args&, int) { return v.is_undefined(); }},
      {"none", [](const Value& v, Args&, int) { return v.is_none(); }},
      {"boolean", [](const Value& v, Args&, int) { return v.kind == K::kBool; }},
      {"true", [](const Value& v, Args&, int) { return v.kind == K::kBool && v.b; }},
      {"false", [](const Value& v, Args&, int) { return v.kind == K::kBool && !v.b; }},
      {"integer", [](const Value& v, Args&, int) { return v.kind == K::kInt; }},
      {"float", [](const Value& v, Args&, int) { return v.kind == K::kFloat; }},
      {"number", [](const Value& v, Args&, int) { return v.is_number(); }},
      {"string", [](const Value& v, Args&, int) { return v.is_string(); }},
      {"mapping", [](const Value& v, Args&, int) { return v.is_dict() && !v.is_namespace; }},
      {"iterable",
       [](const Value& v, Args&, int) {
         return v.is_undefined() || v.is_string() || v.is_list() ||
                (v.is_dict() && !v.is_namespace);
       }},
      {"sequence",
       [](const Value& v, Args&, int) {
         return v.is_undefined() || v.is_string() || (v.is_list() && !v.is_iterator) ||
                (v.is_dict() && !v.is_namespace);
       }},
      {"callable", [](const Value& v, Args&, int) { return v.kind == K::kFunc; }},
      {"escaped", [](const Value& v, Args&, int) { return v.is_string() && v.is_markup; }},
      {"sameas",
       [](const Value& v, Args& a, int line) {
         if (a.pos.size() != 1) Fail(line, "the test 'sameas' takes one argument");
         const Value& o = a.pos[0];
         if (v.kind != o.kind) return false;
         switch (v.kind) {
           case K::kNone:
           case K::kUndefined:
             return true;
           case K::kBool:
             return v.b == o.b;
           case K::kInt:
             return v.i == o.i && v.i >= -5 && v.i <= 256;  // CPython's small ints
           case K::kString:
             return v.s == o.s;
           case K::kList:
             return v.list == o.list;
           case K::kDict:
             return v.dict == o.dict;
           case K::kFunc:
             return v.func == o.func;
           default:
             return false;
         }
       }},
      {"in",
       [](const Value& v, Args& a, int line) {
         if (a.pos.size() != 1) Fail(line, "the test 'in' takes one argument");
         const Value& seq = a.pos[0];
         if (seq.is_string()) {
           if (!v.is_string())
             Fail(line, fmt::format("'in <string>' requires string as left operand, not {}",
                                    TypeName(v)));
           return seq.s->find(*v.s) != std::string::npos;
         }
         if (seq.is_dict() && !seq.is_namespace)
           return v.is_string() && seq.dict->Find(*v.s) != nullptr;
         const std::vector<Value> items = Iterate(seq, line);
         for (std::size_t k = 0; k < items.size(); ++k) {
           if (!Equal(items[k], v)) continue;
           if (k + 1 < items.size()) UsedPartly(seq);  // a generator keeps the rest
           return true;
         }
         return false;
       }},
      {"odd", [](const Value& v, Args&, int line) { return IntArg(v, "odd", line) % 2 != 0; }},
      {"even", [](const Value& v, Args&, int line) { return IntArg(v, "even", line) % 2 == 0; }},
      {"divisibleby",
       [](const Value& v, Args& a, int line) {
         if (a.pos.size() != 1) Fail(line, "the test 'divisibleby' takes one argument");
         int64_t d = IntArg(a.pos[0], "divisibleby", line);
         if (d == 0) Fail(line, "integer division or modulo by zero");
         return IntArg(v, "divisibleby", line) % d == 0;
       }},
      {"lower",
       [](const Value& v, Args&, int line) {
         std::string s = AsciiText(v, "lower", line);
         return std::any_of(s.begin(), s.end(),
                            [](char c) { return std::islower(static_cast<unsigned char>(c)); }) &&
                std::none_of(s.begin(), s.end(),
                             [](char c) { return std::isupper(static_cast<unsigned char>(c)); });
       }},
      {"upper",
       [](const Value& v, Args&, int line) {
         std::string s = AsciiText(v, "upper", line);
         return std::any_of(s.begin(), s.end(),
                            [](char c) { return std::isupper(static_cast<unsigned char>(c)); }) &&
                std::none_of(s.begin(), s.end(),
                             [](char c) { return std::islower(static_cast<unsigned char>(c)); });
       }},
      {"eq", [](const Value& v, Args& a, int line) { return CompareTest("eq", v, a, line); }},
      {"ne", [](const Value& v, Args& a, int line) { return CompareTest("ne", v, a, line); }},
      {"lt", [](const Value& v, Args& a, int line) { return CompareTest("lt", v, a, line); }},
      {"le", [](const Value& v, Args& a, int line) { return CompareTest("le", v, a, line); }},
      {"gt", [](const Value& v, Args& a, int line) { return CompareTest("gt", v, a, line); }},
      {"ge", [](const Value& v, Args& a, int line) { return CompareTest("ge", v, a, line); }},
  };
  return k;
}

std::string CanonicalTest(const std::string& name) {
  static const std::map<std::string, std::string> k = {
      {"==", "eq"}, {"equalto", "eq"}, {"!=", "ne"},          {"<", "lt"}, {"lessthan", "lt"},
      {"<=", "le"}, {">", "gt"},       {"greaterthan", "gt"}, {">=", "ge"}};
  auto it = k.find(name);
  return it == k.end() ? name : it->second;
}

// ---- globals ------------------------------------------------------------------------------

struct Builtin final : Callable {
  std::function<Value(Args&, int)> fn;
  Value Call(Renderer&, Args& args, int line) const override {
    Value out = fn(args, line);
    Charge(Cost(out));
    return out;
  }
};

// `repr`: what Python prints for it (a class prints its name; a function its address, refused).
Value MakeBuiltin(const char* name, std::function<Value(Args&, int)> fn, std::string repr = "") {
  auto b = std::make_shared<Builtin>();
  b->name = name;
  b->fn = std::move(fn);
  b->repr = std::move(repr);
  return Value::Func(std::move(b));
}

Value Range(Args& a, int line) {
  if (!a.kw.empty() || a.pos.empty() || a.pos.size() > 3)
    Fail(line, "range() takes 1 to 3 integer arguments");
  int64_t start = 0, stop, step = 1;
  if (a.pos.size() == 1) {
    stop = IntArg(a.pos[0], "range", line);
  } else {
    start = IntArg(a.pos[0], "range", line);
    stop = IntArg(a.pos[1], "range", line);
    if (a.pos.size() == 3) step = IntArg(a.pos[2], "range", line);
  }
  if (step == 0) Fail(line, "range() arg 3 must not be zero");
  __int128 n = step > 0 ? (stop > start ? (__int128{stop} - start + step - 1) / step : 0)
                        : (stop < start ? (__int128{start} - stop - step - 1) / -step : 0);
  if (n > 100000)
    Fail(line, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  std::vector<Value> out;
  for (int64_t k = 0; k < static_cast<int64_t>(n); ++k) out.push_back(Value::Int(start + k * step));
  return Value::List(std::move(out));
}

Value MakeNamespace(Args& a, int line, bool ns) {
  Value d = Value::MakeDict();
  d.is_namespace = ns;
  if (a.pos.size() > 1)
    Fail(line,
         fmt::format("{}() takes at most one positional argument", ns ? "namespace" : "dict"));
  if (!a.pos.empty()) {
    if (!a.pos[0].is_dict() || a.pos[0].is_namespace) Fail(line, "namespace()/dict() take a dict");
    for (const auto& [k, v] : a.pos[0].dict->items) d.dict->Set(k, v);
  }
  for (auto& [k, v] : a.kw) d.dict->Set(k, v);
  if (ns) TrackNamespace(d.dict);
  return d;
}

}  // namespace

bool KnownFilter(std::string_view name) {
  return Filters().count(Canonical(std::string(name))) > 0;
}
bool KnownTest(std::string_view name) {
  return Tests().count(CanonicalTest(std::string(name))) > 0;
}

// A filter or test reads its value and arguments and builds its result: each costs its size in
// steps (Cost), so a filter over a long list, or one applied to every item by map, spends the
// budget in proportion to its work.
int64_t ArgsCost(const Value& v, const Args& args) {
  int64_t cost = Cost(v);
  for (const Value& x : args.pos) cost += Cost(x);
  for (const auto& kv : args.kw) cost += Cost(kv.second);
  return cost;
}

Value ApplyFilter(const std::string& name, const Value& v, Args& args, int line) {
  auto it = Filters().find(Canonical(name));
  if (it == Filters().end()) Fail(line, fmt::format("the filter '{}' is not supported", name));
  Charge(ArgsCost(v, args));
  Value out = it->second(v, args, line);
  Charge(Cost(out));
  return out;
}

bool ApplyTest(const std::string& name, const Value& v, Args& args, int line) {
  auto it = Tests().find(CanonicalTest(name));
  if (it == Tests().end()) Fail(line, fmt::format("the test '{}' is not supported", name));
  Charge(ArgsCost(v, args));
  return it->second(v, args, line);
}

Value Global(const std::string& name) {
  if (name == "range") return MakeBuiltin("range", Range, "<class 'range'>");
  if (name == "namespace") {
    return MakeBuiltin(
        "namespace", [](Args& a, int line) { return MakeNamespace(a, line, true); },
        "<class 'jinja2.utils.Namespace'>");
  }
  if (name == "dict") {
    return MakeBuiltin(
        "dict", [](Args& a, int line) { return MakeNamespace(a, line, false); }, "<class 'dict'>");
  }
  if (name == "raise_exception") {
    return MakeBuiltin("raise_exception", [](Args& a, int line) -> Value {
      throw RenderError{a.pos.empty() ? std::string() : ToStr(a.pos[0]), line, true};
    });
  }
  if (name == "strftime_now") {
    return MakeBuiltin("strftime_now", [](Args& a, int line) {
      if (a.pos.size() != 1 || !a.pos[0].is_string())
        Fail(line, "strftime_now() takes one format string");
      std::time_t t = std::time(nullptr);
      std::tm tm{};
      localtime_r(&t, &tm);
      char buf[512];
      std::size_t n = std::strftime(buf, sizeof buf, a.pos[0].s->c_str(), &tm);
      return Value::Str(std::string(buf, n));
    });
  }
  for (const char* u : {"cycler", "joiner", "lipsum"}) {
    if (name == u) {
      return MakeBuiltin(u, [u](Args&, int line) -> Value {
        Fail(line, fmt::format("the global '{}' is not supported", u));
      });
    }
  }
  return Value::Undefined(name);
}

}  // namespace cputrain::chat::jinja
