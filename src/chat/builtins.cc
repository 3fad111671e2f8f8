// Jinja2's builtin filters and tests, the Python methods of str, dict and list that templates
// call, and the globals of transformers' environment (jinja.h). Each behaves as Jinja2 3.1 in
// transformers' ImmutableSandboxedEnvironment: methods that modify a list or dict are refused as
// its sandbox refuses them, range() stops at 100,000 items. Case mapping beyond ASCII is
// CPython's for lower(); upper(), title() and capitalize() of non-ASCII text are refused by name.
#include <algorithm>
#include <cmath>
#include <ctime>
#include <set>
#include <string>

#include "chat/jinja.h"
#include "fmt/format.h"
#include "text/python_text.h"

namespace cputrain::chat::jinja {
namespace {

using task::NextCodePoint;
using task::PyIsSpace;

// ---- arguments ----------------------------------------------------------------------------

// Binds a call's arguments to named parameters with defaults, as Python does.
class Params {
 public:
  Params(const std::string& fn, Args& args, std::vector<std::pair<const char*, Value>> spec,
         int line)
      : fn_(fn), line_(line) {
    if (args.pos.size() > spec.size()) {
      Fail(line, fmt::format("{}() takes at most {} argument(s) ({} given)", fn, spec.size(),
                             args.pos.size()));
    }
    for (std::size_t k = 0; k < spec.size(); ++k) {
      names_.push_back(spec[k].first);
      values_.push_back(k < args.pos.size() ? args.pos[k] : spec[k].second);
    }
    for (auto& [name, v] : args.kw) {
      auto it = std::find(names_.begin(), names_.end(), name);
      if (it == names_.end())
        Fail(line, fmt::format("{}() got an unexpected keyword argument '{}'", fn, name));
      values_[static_cast<std::size_t>(it - names_.begin())] = v;
    }
  }
  const Value& operator[](std::size_t k) const { return values_[k]; }
  std::string Str(std::size_t k) const {
    if (!values_[k].is_string())
      Fail(line_, fmt::format("{}(): '{}' must be a string, not {}", fn_, names_[k],
                              TypeName(values_[k])));
    return *values_[k].s;
  }
  int64_t Int(std::size_t k) const {
    if (values_[k].kind != Value::Kind::kInt && values_[k].kind != Value::Kind::kBool) {
      Fail(line_, fmt::format("{}(): '{}' must be an integer, not {}", fn_, names_[k],
                              TypeName(values_[k])));
    }
    return values_[k].kind == Value::Kind::kBool ? values_[k].b : values_[k].i;
  }
  bool Bool(std::size_t k) const { return Truthy(values_[k]); }

 private:
  std::string fn_;
  int line_;
  std::vector<std::string> names_;
  std::vector<Value> values_;
};

// ---- strings ------------------------------------------------------------------------------

std::vector<std::string> Chars(const std::string& s) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < s.size();) {
    std::size_t start = i;
    NextCodePoint(s, &i);
    out.push_back(s.substr(start, i - start));
  }
  return out;
}

bool IsAscii(const std::string& s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

std::string AsciiCase(const std::string& s, bool upper, const char* what, int line) {
  if (!IsAscii(s)) {
    if (!upper) return task::PyLower(s);
    Fail(line, fmt::format("{} of text beyond ASCII is not supported", what));
  }
  std::string out = s;
  for (char& c : out)
    c = static_cast<char>(upper ? std::toupper(static_cast<unsigned char>(c))
                                : std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// str.strip/lstrip/rstrip(chars=None).
std::string Strip(const std::string& s, const Value& chars, bool left, bool right, int line) {
  std::set<char32_t> set;
  const bool ws = chars.is_none() || chars.is_undefined();
  if (!ws) {
    if (!chars.is_string()) Fail(line, "strip arg must be None or str");
    for (std::size_t i = 0; i < chars.s->size();) set.insert(NextCodePoint(*chars.s, &i));
  }
  auto strip_it = [&](char32_t c) { return ws ? PyIsSpace(c) : set.count(c) > 0; };
  std::vector<std::size_t> starts = CodePointStarts(s);
  std::size_t b = 0, e = starts.size() - 1;
  while (left && b < e) {
    std::size_t i = starts[b];
    if (!strip_it(NextCodePoint(s, &i))) break;
    ++b;
  }
  while (right && e > b) {
    std::size_t i = starts[e - 1];
    if (!strip_it(NextCodePoint(s, &i))) break;
    --e;
  }
  return s.substr(starts[b], starts[e] - starts[b]);
}

// str.split(sep=None, maxsplit=-1).
Value Split(const std::string& s, const Value& sep, int64_t maxsplit, int line) {
  std::vector<Value> out;
  if (sep.is_none() || sep.is_undefined()) {
    std::size_t i = 0;
    auto skip_space = [&] {
      while (i < s.size()) {
        std::size_t n = i;
        if (!PyIsSpace(NextCodePoint(s, &n))) break;
        i = n;
      }
    };
    skip_space();
    while (i < s.size()) {
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        std::string rest = s.substr(i);
        out.push_back(Value::Str(Strip(rest, Value::None(), false, true, line)));
        return Value::List(std::move(out));
      }
      std::size_t start = i;
      while (i < s.size()) {
        std::size_t n = i;
        if (PyIsSpace(NextCodePoint(s, &n))) break;
        i = n;
      }
      CheckItems(out.size() + 1, "a split string's list");
      out.push_back(Value::Str(s.substr(start, i - start)));
      skip_space();
    }
    return Value::List(std::move(out));
  }
  if (!sep.is_string()) Fail(line, "must be str or None");
  if (sep.s->empty()) Fail(line, "empty separator");
  std::size_t start = 0;
  for (;;) {
    std::size_t at = maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit
                         ? std::string::npos
                         : s.find(*sep.s, start);
    if (at == std::string::npos) break;
    CheckItems(out.size() + 2, "a split string's list");
    out.push_back(Value::Str(s.substr(start, at - start)));
    start = at + sep.s->size();
  }
  out.push_back(Value::Str(s.substr(start)));
  return Value::List(std::move(out));
}

// str.splitlines(keepends): Python's line boundaries, kept on each line when keepends.
std::vector<std::string> SplitLines(const std::string& s, bool keepends) {
  std::vector<std::string> lines;
  std::size_t start = 0, i = 0;
  while (i < s.size()) {
    std::size_t at = i;
    char32_t c = NextCodePoint(s, &i);
    bool brk = c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || (c >= 0x1c && c <= 0x1e) ||
               c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!brk) continue;
    CheckItems(lines.size() + 1, "a string's lines");
    if (c == '\r' && i < s.size() && s[i] == '\n') ++i;
    lines.push_back(s.substr(start, (keepends ? i : at) - start));
    start = i;
  }
  if (start < s.size()) lines.push_back(s.substr(start));
  return lines;
}

bool StartsOrEnds(const std::string& s, const Value& arg, bool starts, int line) {
  auto one = [&](const Value& p) {
    if (!p.is_string()) Fail(line, "startswith/endswith take a str or a tuple of str");
    const std::string& x = *p.s;
    return x.size() <= s.size() && (starts ? s.compare(0, x.size(), x) == 0
                                           : s.compare(s.size() - x.size(), x.size(), x) == 0);
  };
  if (arg.is_list() && arg.is_tuple) {
    return std::any_of(arg.list->begin(), arg.list->end(), one);
  }
  return one(arg);
}

std::string Replace(const std::string& s, const std::string& from, const std::string& to,
                    int64_t count) {
  // The result's size first, so that a replacement that would pass the limit is refused before
  // it is built.
  std::size_t found = 0;
  if (from.empty()) {
    found = Utf8Length(s) + 1;
  } else {
    for (std::size_t at = s.find(from); at != std::string::npos;
         at = s.find(from, at + from.size()))
      ++found;
  }
  if (count >= 0) found = std::min(found, static_cast<std::size_t>(count));
  const std::size_t removed = from.size() * found;
  CheckBytes(to.size() != 0 && found > (SIZE_MAX - s.size()) / to.size()
                 ? SIZE_MAX
                 : s.size() - removed + to.size() * found,
             "a replaced string");
  std::string out;
  if (from.empty()) {  // Python inserts `to` between every character
    std::vector<std::string> chars = Chars(s);
    int64_t n = 0;
    for (const std::string& c : chars) {
      if (count < 0 || n++ < count) out += to;
      out += c;
    }
    if (count < 0 || n < count) out += to;
    return out;
  }
  std::size_t start = 0;
  int64_t n = 0;
  for (;;) {
    std::size_t at = count >= 0 && n >= count ? std::string::npos : s.find(from, start);
    if (at == std::string::npos) break;
    out.append(s, start, at - start);
    out += to;
    start = at + from.size();
    ++n;
  }
  out.append(s, start);
  return out;
}

std::string Title(const std::string& s, int line) {
  if (!IsAscii(s)) Fail(line, "title() of text beyond ASCII is not supported");
  std::string out = AsciiCase(s, false, "title()", line);
  bool prev_cased = false;
  for (char& c : out) {
    bool alpha = std::isalpha(static_cast<unsigned char>(c)) != 0;
    if (alpha)
      c = static_cast<char>(prev_cased ? std::tolower(static_cast<unsigned char>(c))
                                       : std::toupper(static_cast<unsigned char>(c)));
    prev_cased = alpha;
  }
  return out;
}

// str.capitalize(): CPython's, to the code point (python_text.h).
std::string Capitalize(const std::string& s) { return task::PyCapitalize(s); }

int64_t Find(const std::string& s, const std::string& sub, bool reverse) {
  std::size_t at = reverse ? s.rfind(sub) : s.find(sub);
  return at == std::string::npos
             ? -1
             : static_cast<int64_t>(Utf8Length(std::string_view(s).substr(0, at)));
}

// ---- methods ------------------------------------------------------------------------------

struct Method final : Callable {
  Value self;
  Value Call(Renderer&, Args& args, int line) const override;
};

Value StrMethod(const std::string& s, const std::string& m, Args& args, int line) {
  if (m == "strip" || m == "lstrip" || m == "rstrip") {
    Params p(m, args, {{"chars", Value::None()}}, line);
    return Value::Str(Strip(s, p[0], m != "rstrip", m != "lstrip", line));
  }
  if (m == "split" || m == "rsplit") {
    Params p(m, args, {{"sep", Value::None()}, {"maxsplit", Value::Int(-1)}}, line);
    if (m == "rsplit" && p.Int(1) >= 0) Fail(line, "rsplit() with a maxsplit is not supported");
    return Split(s, p[0], p.Int(1), line);
  }
  if (m == "startswith" || m == "endswith") {
    Params p(m, args, {{"prefix", Value::Undefined()}}, line);
    return Value::Bool(StartsOrEnds(s, p[0], m == "startswith", line));
  }
  if (m == "upper" || m == "lower") return Value::Str(AsciiCase(s, m == "upper", "upper()", line));
  if (m == "title") return Value::Str(Title(s, line));
  if (m == "capitalize") return Value::Str(Capitalize(s));
  if (m == "replace") {
    Params p(m, args,
             {{"old", Value::Undefined()}, {"new", Value::Undefined()}, {"count", Value::Int(-1)}},
             line);
    return Value::Str(Replace(s, p.Str(0), p.Str(1), p.Int(2)));
  }
  if (m == "find" || m == "rfind" || m == "count") {
    Params p(m, args, {{"sub", Value::Undefined()}}, line);
    std::string sub = p.Str(0);
    if (m != "count") return Value::Int(Find(s, sub, m == "rfind"));
    if (sub.empty()) return Value::Int(static_cast<int64_t>(Utf8Length(s)) + 1);
    int64_t n = 0;
    for (std::size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size()))
      ++n;
    return Value::Int(n);
  }
  if (m == "join") {
    Params p(m, args, {{"iterable", Value::Undefined()}}, line);
    const std::vector<Value> items = Iterate(p[0], line);
    std::size_t n = items.empty() ? 0 : s.size() * (items.size() - 1);
    for (const Value& v : items) {
      if (!v.is_string())
        Fail(line, fmt::format("sequence item: expected str instance, {} found", TypeName(v)));
      n += v.s->size();
    }
    CheckBytes(n, "a joined string");
    std::string out;
    out.reserve(n);
    for (std::size_t k = 0; k < items.size(); ++k) {
      if (k) out += s;
      out += *items[k].s;
    }
    return Value::Str(std::move(out));
  }
  if (m == "splitlines") {
    Params p(m, args, {{"keepends", Value::Bool(false)}}, line);
    std::vector<Value> out;
    for (std::string& l : SplitLines(s, p.Int(0) != 0)) out.push_back(Value::Str(std::move(l)));
    return Value::List(std::move(out));
  }
  if (m == "removeprefix" || m == "removesuffix") {
    Params p(m, args, {{"affix", Value::Undefined()}}, line);
    std::string a = p.Str(0);
    bool pre = m == "removeprefix";
    if (StartsOrEnds(s, p[0], pre, line))
      return Value::Str(pre ? s.substr(a.size()) : s.substr(0, s.size() - a.size()));
    return Value::Str(s);
  }
  if (m == "isdigit" || m == "isalpha" || m == "isalnum" || m == "isspace" || m == "islower" ||
      m == "isupper") {
    if (!IsAscii(s)) Fail(line, fmt::format("str.{}() of text beyond ASCII is not supported", m));
    if (s.empty()) return Value::Bool(false);
    auto all = [&](auto pred) {
      return std::all_of(s.begin(), s.end(),
                         [&](char c) { return pred(static_cast<unsigned char>(c)) != 0; });
    };
    if (m == "isdigit") return Value::Bool(all([](int c) { return std::isdigit(c); }));
    if (m == "isalpha") return Value::Bool(all([](int c) { return std::isalpha(c); }));
    if (m == "isalnum") return Value::Bool(all([](int c) { return std::isalnum(c); }));
    if (m == "isspace") return Value::Bool(all([](int c) { return std::isspace(c); }));
    bool has_cased = std::any_of(s.begin(), s.end(), [](char c) {
      return std::isalpha(static_cast<unsigned char>(c)) != 0;
    });
    if (m == "islower")
      return Value::Bool(has_cased && all([](int c) { return !std::isupper(c); }));
    return Value::Bool(has_cased && all([](int c) { return !std::islower(c); }));
  }
  Fail(line, fmt::format("the str method '{}' is not supported", m));
}

Value DictMethod(const Value& self, const std::string& m, Args& args, int line) {
  const Dict& d = *self.dict;
  if (m == "get") {
    Params p(m, args, {{"key", Value::Undefined()}, {"default", Value::None()}}, line);
    if (!p[0].is_string()) return p[1];
    const Value* v = d.Find(*p[0].s);
    return v ? *v : p[1];
  }
  std::vector<Value> out;
  Value::View view = Value::View::kNone;
  if (m == "items") {
    for (const auto& [k, v] : d.items) out.push_back(Value::List({Value::Str(k), v}, true));
    view = Value::View::kItems;
  } else if (m == "keys") {
    for (const auto& kv : d.items) out.push_back(Value::Str(kv.first));
    view = Value::View::kKeys;
  } else if (m == "values") {
    for (const auto& kv : d.items) out.push_back(kv.second);
    view = Value::View::kValues;
  } else if (m == "copy") {
    Value c = Value::MakeDict();
    *c.dict = d;
    return c;
  } else {
    Fail(line, fmt::format("the dict method '{}' is not supported (transformers' sandbox refuses "
                           "methods that modify a dict)",
                           m));
  }
  Value v = Value::List(std::move(out));  // a view: prints as dict_keys([...]), has no index
  v.is_iterator = true;
  v.view = view;
  return v;
}

Value ListMethod(const Value& self, const std::string& m, Args& args, int line) {
  if (m == "count" || m == "index") {
    Params p(m, args, {{"value", Value::Undefined()}}, line);
    int64_t n = 0;
    for (std::size_t k = 0; k < self.list->size(); ++k) {
      if (!Equal((*self.list)[k], p[0])) continue;
      if (m == "index") return Value::Int(static_cast<int64_t>(k));
      ++n;
    }
    if (m == "index") Fail(line, fmt::format("{} is not in list", Repr(p[0])));
    return Value::Int(n);
  }
  if (m == "copy") return Value::List(*self.list);
  Fail(line, fmt::format("the list method '{}' is not supported (transformers' sandbox refuses "
                         "methods that modify a list)",
                         m));
}

// markupsafe's Markup methods: those that make text return Markup, replace() and join() escape
// the text they add (a plain str's), split() and splitlines() give lists of Markup.
Value MarkupMethod(const Value& self, const std::string& m, Args& args, int line) {
  auto mark = [](Value v) {
    if (v.is_string()) v.is_markup = true;
    if (v.is_list()) {
      std::vector<Value> items = *v.list;
      for (Value& x : items) x.is_markup = x.is_string();
      return Value::List(std::move(items), v.is_tuple);
    }
    return v;
  };
  auto escaped = [](const Value& v) {
    return v.is_string() && v.is_markup ? v : Value::Str(HtmlEscape(ToStr(v)));
  };
  if (m == "replace") {
    Args a = args;
    if (a.pos.size() > 1) a.pos[1] = escaped(a.pos[1]);
    for (auto& [k, v] : a.kw) {
      if (k == "new") v = escaped(v);
    }
    return mark(StrMethod(*self.s, m, a, line));
  }
  if (m == "join") {
    Params p(m, args, {{"iterable", Value::Undefined()}}, line);
    Args a;
    std::vector<Value> items;
    for (const Value& v : Iterate(p[0], line)) items.push_back(escaped(v));
    a.pos.push_back(Value::List(std::move(items)));
    return mark(StrMethod(*self.s, m, a, line));
  }
  static const std::set<std::string> kMarkup = {"capitalize",   "title",  "lower",  "upper",
                                                "strip",        "lstrip", "rstrip", "removeprefix",
                                                "removesuffix", "split",  "rsplit", "splitlines"};
  Value v = StrMethod(*self.s, m, args, line);
  return kMarkup.count(m) ? mark(std::move(v)) : v;
}

Value Method::Call(Renderer&, Args& args, int line) const {
  int64_t cost = Cost(self);
  for (const Value& v : args.pos) cost += Cost(v);
  for (const auto& kv : args.kw) cost += Cost(kv.second);
  Charge(cost);
  Value out = self.is_string() && self.is_markup ? MarkupMethod(self, name, args, line)
              : self.is_string()                 ? StrMethod(*self.s, name, args, line)
              : self.is_dict()                   ? DictMethod(self, name, args, line)
                                                 : ListMethod(self, name, args, line);
  Charge(Cost(out));
  return out;
}

const std::set<std::string>& StrMethods() {
  static const std::set<std::string> k = {
      "capitalize",   "casefold",    "center",    "count",      "encode",       "endswith",
      "expandtabs",   "find",        "format",    "format_map", "index",        "isalnum",
      "isalpha",      "isascii",     "isdecimal", "isdigit",    "isidentifier", "islower",
      "isnumeric",    "isprintable", "isspace",   "istitle",    "isupper",      "join",
      "ljust",        "lower",       "lstrip",    "maketrans",  "partition",    "removeprefix",
      "removesuffix", "replace",     "rfind",     "rindex",     "rjust",        "rpartition",
      "rsplit",       "rstrip",      "split",     "splitlines", "startswith",   "strip",
      "swapcase",     "title",       "translate", "upper",      "zfill"};
  return k;
}
const std::set<std::string>& DictMethods() {
  static const std::set<std::string> k = {"clear",      "copy",   "fromkeys", "get",
                                          "items",      "keys",   "pop",      "popitem",
                                          "setdefault", "update", "values"};
  return k;
}
const std::set<std::string>& ListMethods() {
  static const std::set<std::string> k = {"append", "clear", "copy",   "count",   "extend", "index",
                                          "insert", "pop",   "remove", "reverse", "sort"};
  return k;
}

Value Bind(const Value& self, const std::string& name) {
  auto m = std::make_shared<Method>();
  m->name = name;
  m->self = self;
  return Value::Func(std::move(m));
}

}  // namespace

Value CallStrMethod(const std::string& s, const std::string& method, Args& args, int line) {
  return StrMethod(s, method, args, line);
}

Value GetAttr(const Value& v, const std::string& name, int line) {
  if (v.is_undefined()) Fail(line, fmt::format("'{}' is undefined", v.s->empty() ? "value" : *v.s));
  if (!name.empty() && name[0] == '_') return Value::Undefined(name);  // the sandbox's rule
  if (v.is_string() && StrMethods().count(name)) return Bind(v, name);
  if (v.is_dict() && !v.is_namespace && DictMethods().count(name)) return Bind(v, name);
  if (v.is_sequence() && !v.is_tuple && ListMethods().count(name)) return Bind(v, name);
  if (v.is_sequence() && v.is_tuple && (name == "count" || name == "index")) return Bind(v, name);
  if (v.is_dict()) {
    if (const Value* item = v.dict->Find(name)) return *item;
  }
  return Value::Undefined(name);
}

Value GetItem(const Value& v, const Value& key, int line) {
  if (v.is_undefined()) Fail(line, fmt::format("'{}' is undefined", v.s->empty() ? "value" : *v.s));
  if (v.is_dict() && !v.is_namespace && key.is_string()) {
    if (const Value* item = v.dict->Find(*key.s)) return *item;
    return GetAttr(v, *key.s, line);
  }
  if (v.is_sequence() || v.is_string()) {
    if (key.kind == Value::Kind::kInt || key.kind == Value::Kind::kBool) {
      int64_t i = key.kind == Value::Kind::kBool ? key.b : key.i;
      if (v.is_list()) {
        int64_t n = static_cast<int64_t>(v.list->size());
        if (i < 0) i += n;
        return i >= 0 && i < n ? (*v.list)[static_cast<std::size_t>(i)] : Value::Undefined("index");
      }
      Charge(Cost(v));  // finding the code point reads the string
      std::vector<std::size_t> starts = CodePointStarts(*v.s);
      int64_t n = static_cast<int64_t>(starts.size()) - 1;
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::Undefined("index");
      auto k = static_cast<std::size_t>(i);
      Value c = Value::Str(v.s->substr(starts[k], starts[k + 1] - starts[k]));
      c.is_markup = v.is_markup;  // Markup's __getitem__
      return c;
    }
  }
  if (key.is_string()) return GetAttr(v, *key.s, line);
  return Value::Undefined("item");
}

void UsedPartly(const Value& v) {
  if (v.is_generator()) v.list->use = Items::Use::kPartly;
}

std::vector<Value> Iterate(const Value& v, int line) {
  Charge(Cost(v));
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kList:
      if (v.is_generator()) {  // consumed by its first use, as Python's generators are
        if (v.list->use == Items::Use::kPartly) {
          Fail(line,
               "a generator (the output of map, select, ...) is used again after a use that "
               "took only some of its items; add | list where it is made");
        }
        if (v.list->use == Items::Use::kSpent) return {};
        v.list->use = Items::Use::kSpent;
      }
      return *v.list;
    case Value::Kind::kString: {
      CheckItems(Utf8Length(*v.s), "a string's characters");
      std::vector<Value> out;
      for (std::string& c : Chars(*v.s)) out.push_back(Value::Str(std::move(c)));
      return out;
    }
    case Value::Kind::kDict:
      if (!v.is_namespace) {
        std::vector<Value> out;
        for (const auto& kv : v.dict->items) out.push_back(Value::Str(kv.first));
        return out;
      }
      break;
    default:
      break;
  }
  Fail(line, fmt::format("'{}' object is not iterable", TypeName(v)));
}

}  // namespace cputrain::chat::jinja
