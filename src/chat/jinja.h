// The Jinja2 subset that chat templates use, as transformers runs it (internal to src/chat; the
// public interface is chat_template.h). Three stages:
//
//   Lex    the template's text into data, {{ }}, {% %} pieces with Jinja2's whitespace rules
//          (trim_blocks, lstrip_blocks, `-` and `+` markers), then expression tokens;
//   Parse  the tokens into a tree of statements (Node) and expressions (Expr); every construct
//          we do not run (include, import, extends, block, call, raw, recursive loops, unknown
//          filters and tests, ...) is refused here by name with its line;
//   Render the tree with a context of Values: Python's semantics for values (str(), repr(),
//          ==, <, +, %, //, slicing, truthiness), Jinja2's scoping (a frame per loop iteration,
//          macros that see the frame they were defined in), the sandbox's limits (range() of at
//          most 100,000 items), and hard limits of our own against templates that never end
//          (a budget of evaluation steps, an output cap, a call depth).
//
// Value semantics follow Python's where the template can see them: ints and floats are
// distinct (4/2 prints 2.0), True == 1, dicts keep insertion order, a tuple prints as (1,).
//
// Thread safety: a parsed Program is immutable; each Render uses its own state, so one Program
// may render from many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace cputrain::chat::jinja {

struct Value;
struct Dict;
class Renderer;

// Positional and keyword arguments of a call, filter or test (after its subject).
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};

// A function a template can call: a macro, a builtin (range, namespace, raise_exception, ...), a
// bound method ("a b".split), or loop.cycle.
struct Callable {
  virtual ~Callable() = default;
  virtual Value Call(Renderer& r, Args& args, int line) const = 0;
  std::string name;
  std::string repr;  // what Python prints for it; empty where it prints an address (refused)
};

struct Items;

struct Value {
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kFunc
  };
  // kList made by a dict's keys(), values(), items(): Python's views, which print as
  // dict_keys([...]), have a len() but no index, and compare as sets (keys, items).
  enum class View : uint8_t { kNone, kKeys, kValues, kItems };
  Kind kind = Kind::kUndefined;
  bool is_tuple = false;      // kList: a tuple (prints as (a, b))
  bool is_iterator = false;   // kList: a generator (map, select, ...) or a view (below)
  bool is_namespace = false;  // kDict: a namespace() (its attributes may be set)
  bool is_markup = false;     // kString: markupsafe's Markup (the output of |e and |safe)
  View view = View::kNone;    // kList with is_iterator: a dict view rather than a generator
  bool b = false;
  uint16_t depth = 0;  // kList: how deep lists and dicts nest in it (1: none inside)
  int64_t i = 0;
  double f = 0;
  std::shared_ptr<const std::string> s;  // kString; kUndefined: the name that was undefined
  std::shared_ptr<Items> list;
  std::shared_ptr<Dict> dict;
  std::shared_ptr<const Callable> func;

  static Value Undefined(std::string name = "");
  static Value None();
  static Value Bool(bool v);
  static Value Int(int64_t v);
  static Value Float(double v);
  static Value Str(std::string v);
  static Value Markup(std::string v);  // a str marked safe: |e leaves it as it is
  static Value List(std::vector<Value> items, bool tuple = false);
  static Value MakeDict();
  static Value Func(std::shared_ptr<const Callable> f);

  bool is_undefined() const { return kind == Kind::kUndefined; }
  bool is_none() const { return kind == Kind::kNone; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_number() const {
    return kind == Kind::kInt || kind == Kind::kFloat || kind == Kind::kBool;
  }
  bool is_list() const { return kind == Kind::kList; }
  bool is_dict() const { return kind == Kind::kDict; }
  // A list Python holds as a list or tuple: indexable, sliceable, with list methods.
  bool is_sequence() const { return kind == Kind::kList && !is_iterator; }
  bool is_generator() const { return is_iterator && view == View::kNone; }
  const std::string& str() const { return *s; }
};

// A list's items, shared by the Value's copies. Lists are immutable once made; a generator's
// are used once, as Python's generator is consumed by its first use: `use` says how far.
struct Items : std::vector<Value> {
  using std::vector<Value>::vector;
  explicit Items(std::vector<Value> v) : std::vector<Value>(std::move(v)) {}
  // kSpent: consumed to the end (later uses see no items, as Python's); kPartly: a use took some
  // (first, in, a loop left by break), so later uses are refused rather than guessed.
  enum class Use : uint8_t { kFresh, kSpent, kPartly };
  Use use = Use::kFresh;
};

// A dict in insertion order (Python's), with a hash index so lookups stay O(1).
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  std::unordered_map<std::string, std::size_t> index;
  uint16_t depth = 1;  // as Value::depth, over the values set so far
  const Value* Find(const std::string& key) const;
  void Set(const std::string& key, Value v);
};

// ---- value semantics (value.cc) -----------------------------------------------------------
// Every error is a RenderError (below) naming `line`.
bool Truthy(const Value& v);
std::string TypeName(const Value& v);  // Python's: 'str', 'int', 'list', 'dict', 'NoneType', ...
std::string ToStr(const Value& v);     // str(v); Undefined prints as ""
std::string Repr(const Value& v);      // repr(v)
// json.dumps(v, ensure_ascii=False, indent, separators, sort_keys) as transformers' tojson;
// indent: the text of one level (none: one line). Throws RenderError for values JSON has no
// form for.
std::string ToJson(const Value& v, const std::optional<std::string>& indent,
                   const std::string& item_sep, const std::string& key_sep, bool sort_keys,
                   int line);
bool Equal(const Value& a, const Value& b);
// a < b as Python orders them (numbers, strings by code point, lists): -1/0/1, or 2 where
// neither is less nor equal (a NaN), for which every ordering test is false.
int Compare(const Value& a, const Value& b, int line);
// markupsafe's escape() of a str: & < > " ' as &amp; &lt; &gt; &#34; &#39;.
std::string HtmlEscape(const std::string& s);
std::string PyFloatRepr(double d);
std::size_t Utf8Length(std::string_view s);  // len() of a str: code points
// The byte offsets of each code point of s, and s.size() at the end.
std::vector<std::size_t> CodePointStarts(std::string_view s);

// A fault while rendering: the template raised it (raise_exception) or did something Python
// would refuse (an undefined variable's attribute, 'a' < 1, ...). Carries the template's line.
struct RenderError {
  std::string message;
  int line;
  bool raised = false;  // by the template itself, through raise_exception(message)
};
[[noreturn]] void Fail(int line, std::string message);

// ---- tokens (lexer.cc) --------------------------------------------------------------------
struct Token {
  enum class Kind : uint8_t {
    kData,        // raw text between tags (text holds it, whitespace rules applied)
    kPrintBegin,  // {{
    kPrintEnd,    // }}
    kBlockBegin,  // {%
    kBlockEnd,    // %}
    kName,
    kString,  // text: the decoded string
    kInt,
    kFloat,
    kOp,  // text: the operator or punctuation ("==", "(", "|", ...)
    kEnd
  };
  Kind kind;
  std::string text;
  int64_t i = 0;
  double f = 0;
  int line = 0;
};
// Throws RenderError for a malformed template (an unclosed tag, comment or string, a character
// no expression uses).
std::vector<Token> Lex(std::string_view source);

// ---- tree (parser.cc) ---------------------------------------------------------------------
struct Expr {
  enum class Kind : uint8_t {
    kLiteral,  // value
    kName,     // name
    kList,     // kids
    kTuple,    // kids
    kDict,     // kids: key, value, key, value, ...
    kAttr,     // kids[0].name
    kItem,     // kids[0][kids[1]]
    kSlice,    // kids[0][kids[1]:kids[2]:kids[3]] (null kids where left out)
    kCall,     // kids[0](kids[1..]); the last kw.size() kids are keyword arguments
    kFilter,   // kids[0] | name(kids[1..]); kw as kCall; kids[0] null in a filter block
    kTest,     // kids[0] is [not] name(kids[1..]); negate
    kNeg,      // -kids[0]
    kPos,      // +kids[0]
    kNot,      // not kids[0]
    kAnd,      // kids[0] and kids[1]
    kOr,       // kids[0] or kids[1]
    kBinary,   // kids[0] op kids[1]: + - * / // % ** ~
    kCompare,  // kids[0] ops[0] kids[1] ops[1] kids[2] ... (== != < <= > >= in notin)
    kCond,     // kids[1] if kids[0] else kids[2] (kids[2] null: undefined)
  };
  Kind kind;
  int line = 0;
  std::string name;  // kName, kAttr, kFilter, kTest; kBinary: the operator
  std::vector<std::string> kw;
  std::vector<std::string> ops;
  bool negate = false;
  Value value;
  std::vector<std::unique_ptr<Expr>> kids;
};

struct Node;
using Body = std::vector<std::unique_ptr<Node>>;

struct Node {
  enum class Kind : uint8_t {
    kData,      // text
    kPrint,     // {{ expr }}
    kIf,        // conds[k] -> bodies[k]; bodies.back() is else when bodies > conds
    kFor,       // for targets in expr [if conds[0]]: bodies[0], else bodies[1]
    kSet,       // set targets = expr; or set targets[0].attr = expr (attr non-empty)
    kSetBlock,  // set targets[0] %} bodies[0] {% endset
    kMacro,     // macro name(targets = defaults...) bodies[0]
    kBreak,
    kContinue,
    kGeneration,   // generation %} bodies[0] {% endgeneration: transformers' assistant masks
    kFilterBlock,  // filter expr (a kFilter whose kids[0] is null) bodies[0]
  };
  Kind kind;
  int line = 0;
  std::string text;  // kData; kMacro: the name; kSet: the attribute of a namespace target
  std::unique_ptr<Expr> expr;
  std::vector<std::string> targets;
  std::vector<std::unique_ptr<Expr>> conds;  // kIf conditions; kFor's filter; kMacro defaults
  std::vector<Body> bodies;
  bool uses_loop = true;  // kFor: its body names `loop` (else no loop object is made)
};

struct Program {
  Body body;
};
// Throws RenderError naming the line of what is malformed or unsupported.
Program Parse(std::string_view source);

// ---- rendering (render.cc, builtins.cc) ---------------------------------------------------
struct Output {
  std::string text;
  // [begin, end) byte offsets in text of each {% generation %} block's output, in order.
  std::vector<std::pair<std::size_t, std::size_t>> generation;
};
// Bounds on one rendering, so that no template runs forever or fills memory (docs/sft.md,
// "Limits"). Steps: each statement, expression node and loop iteration counts one, and so does
// the work of building or reading long values: a step per kBytesPerStep bytes of a string and
// per list or dict item (Cost below), so an empty loop body, a filter over a long list or a
// string doubled in a loop spend the budget as fast as the work they do. Sizes: no string
// (output and captures included) passes max_output bytes, no list max_items items, and no
// value nests lists and dicts deeper than kMaxValueDepth; each is refused before it is built.
struct Limits {
  int64_t max_steps = 50'000'000;
  std::size_t max_output = std::size_t{256} << 20;
  std::size_t max_items = 1'000'000;
};
inline constexpr int64_t kBytesPerStep = 16;
inline constexpr int kMaxValueDepth = 256;
Output Render(const Program& program, const Dict& context, const Limits& limits = Limits());

// The rendering running on this thread (Render sets it; none: no limits apply): work charged to
// its step budget and sizes checked against its limits from anywhere in the engine, failing with
// the line it is rendering. CheckBytes/CheckItems run before a string or list is built.
void Charge(int64_t steps);
void CheckBytes(std::size_t bytes, const char* what);
void CheckItems(std::size_t items, const char* what);
int CurrentLine();
// A namespace() made by the rendering: emptied when the rendering ends (render.cc says why).
void TrackNamespace(std::shared_ptr<Dict> d);
// Marks generator v as used only partly (Items::kPartly): a later use is refused by name.
void UsedPartly(const Value& v);
// The steps to build or read v once: 1, plus a step per kBytesPerStep bytes of a string and per
// item of a list or dict (not counting what nests inside them).
int64_t Cost(const Value& v);

// Builtins (builtins.cc). Calling a macro needs the renderer; the rest do not.
bool KnownFilter(std::string_view name);
bool KnownTest(std::string_view name);
Value ApplyFilter(const std::string& name, const Value& v, Args& args, int line);
bool ApplyTest(const std::string& name, const Value& v, Args& args, int line);
// The items a for loop visits: a list's, a dict's keys, a str's characters; Undefined: none.
std::vector<Value> Iterate(const Value& v, int line);
// v.name as Jinja's getattr: a method of a str/dict/list (bound), else the dict's item, else
// Undefined; Undefined.name fails as Jinja's UndefinedError.
Value GetAttr(const Value& v, const std::string& name, int line);
Value GetItem(const Value& v, const Value& key, int line);
// s.method(args) for the str methods templates call (strip, split, startswith, replace, ...).
Value CallStrMethod(const std::string& s, const std::string& method, Args& args, int line);
// The global named `name` (range, namespace, ...), or Undefined.
Value Global(const std::string& name);
// Jinja2's int(default, base), float(default) and round(precision, method) filters (numbers.cc).
Value IntFilter(const Value& v, const Value& dflt, const Value& base, int line);
Value FloatFilter(const Value& v, const Value& dflt, int line);
Value RoundFilter(const Value& v, int64_t precision, const std::string& method, int line);

}  // namespace cputrain::chat::jinja
