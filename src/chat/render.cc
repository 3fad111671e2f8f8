// Renders a parsed template (jinja.h): statements, expressions, scoping, macros, and the
// {% generation %} offsets transformers turns into assistant masks.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "chat/jinja.h"
#include "fmt/format.h"

namespace cputrain::chat::jinja {

// Variables of one scope. Jinja2 gives each for-loop iteration and each macro call its own;
// `set` writes the innermost; lookups go outward, then to the context, then the globals.
struct Frame {
  Dict vars;
  std::shared_ptr<Frame> parent;
};

class Renderer {
 public:
  Renderer(const Dict& context, const Limits& limits) : context_(context), limits_(limits) {
    frame_ = std::make_shared<Frame>();
  }
  // Namespaces are the one value that can hold itself, or a chain of values as long as the
  // budget allows; emptying each one (they are all still held here) frees them without cycles
  // or deep recursion.
  ~Renderer() {
    for (const auto& d : namespaces_) {
      d->items.clear();
      d->index.clear();
    }
  }
  Output Run(const Program& p);
  Value CallMacro(const Node& macro, const std::shared_ptr<Frame>& closure, Args& args, int line);

  // The budget and limits (jinja.h): steps spent, and sizes checked before they are built.
  void Charge(int64_t steps) {
    steps_ += steps;
    if (steps_ > limits_.max_steps) {
      Fail(line_, fmt::format("the template ran more than {} steps (statements, expressions, "
                              "loop iterations and the work on long strings and lists count)",
                              limits_.max_steps));
    }
  }
  void CheckBytes(std::size_t bytes, const char* what) const {
    if (bytes > limits_.max_output) {
      Fail(line_, fmt::format("{} of {} bytes would pass the template's limit of {} bytes on a "
                              "string (its output included)",
                              what, bytes, limits_.max_output));
    }
  }
  void CheckItems(std::size_t items, const char* what) const {
    if (items > limits_.max_items) {
      Fail(line_, fmt::format("{} of {} items would pass the template's limit of {} items on a "
                              "list",
                              what, items, limits_.max_items));
    }
  }
  int line() const { return line_; }
  void TrackNamespace(std::shared_ptr<Dict> d) { namespaces_.push_back(std::move(d)); }

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  Flow Exec(const Body& body);
  Flow ExecFor(const Node& n);
  void ExecSet(const Node& n);
  std::string Capture(const Body& body);
  Value Eval(const Expr& e);
  Value EvalNode(const Expr& e);
  Value EvalCall(const Expr& e);
  Value EvalFilter(const Expr& e);
  Value EvalCompare(const Expr& e);
  Value EvalCollection(const Expr& e);
  Args EvalArgs(const Expr& e, std::size_t first);
  Value Lookup(const std::string& name) const;
  void Step(int line) {
    line_ = line;
    Charge(1);
  }
  void Emit(std::string_view s, int line) {
    line_ = line;
    CheckBytes(out_->size() + s.size(), "the output");
    Charge(static_cast<int64_t>(s.size()) / kBytesPerStep);
    out_->append(s);
  }

  const Dict& context_;
  const Limits& limits_;
  std::shared_ptr<Frame> frame_;
  std::string* out_ = nullptr;
  Output result_;
  int64_t steps_ = 0;
  int line_ = 0;  // of the statement or expression being rendered
  std::vector<std::shared_ptr<Dict>> namespaces_;
  int call_depth_ = 0;
  Value filter_input_;  // the captured body in a {% filter %} block
  // {% generation %} blocks open now, and where the outermost one began in the output.
  int generation_depth_ = 0;
  std::size_t generation_start_ = 0;
};

namespace {

constexpr int kMaxCallDepth = 64;
// Steps an iteration costs: its frame, and with the loop object (a dict of 12 entries) more, so
// that the budget bounds time as it does for expressions. Measured on chat_render (Release,
// 10^6 iterations, user time): an expression step 0.08 us ({{ x }} is two), an empty iteration
// 0.3 us, one whose body names `loop` 2.2 us; 50M steps are then about 4 s.
constexpr int64_t kIterationSteps = 4;
constexpr int64_t kLoopObjectSteps = 28;

// The rendering running on this thread, for the budget functions of jinja.h.
thread_local Renderer* t_rendering = nullptr;

// A macro sees the frame it was defined in, as it is when called. Held weakly: the frame holds
// the macro, and a strong pointer back would be a cycle that is never freed.
struct Macro final : Callable {
  const Node* node;
  std::weak_ptr<Frame> closure;
  Value Call(Renderer& r, Args& args, int line) const override {
    std::shared_ptr<Frame> f = closure.lock();
    if (!f)
      Fail(line, fmt::format("macro '{}' is called after the loop that defined it ended", name));
    return r.CallMacro(*node, f, args, line);
  }
};

struct Cycle final : Callable {
  int64_t index0;
  Value Call(Renderer&, Args& args, int line) const override {
    if (args.pos.empty()) Fail(line, "loop.cycle() needs at least one value");
    return args.pos[static_cast<std::size_t>(index0) % args.pos.size()];
  }
};

void Unpack(const std::vector<std::string>& targets, const Value& v, Dict* vars, int line) {
  if (targets.size() == 1) {
    vars->Set(targets[0], v);
    return;
  }
  std::vector<Value> items = Iterate(v, line);
  if (items.size() != targets.size()) {
    Fail(line, fmt::format("cannot unpack {} values into {} names", items.size(), targets.size()));
  }
  for (std::size_t k = 0; k < targets.size(); ++k) vars->Set(targets[k], items[k]);
}

int64_t CheckedInt(__int128 v, int line) {
  if (v > std::numeric_limits<int64_t>::max() || v < std::numeric_limits<int64_t>::min()) {
    Fail(line, "an integer result does not fit 64 bits (Python's would)");
  }
  return static_cast<int64_t>(v);
}

double Num(const Value& v) {
  return v.kind == Value::Kind::kFloat  ? v.f
         : v.kind == Value::Kind::kBool ? v.b
                                        : static_cast<double>(v.i);
}
bool IsInt(const Value& v) { return v.kind == Value::Kind::kInt || v.kind == Value::Kind::kBool; }
int64_t Int(const Value& v) { return v.kind == Value::Kind::kBool ? v.b : v.i; }

[[noreturn]] void OperandError(const std::string& op, const Value& a, const Value& b, int line) {
  if (a.is_undefined() || b.is_undefined()) {
    const Value& u = a.is_undefined() ? a : b;
    Fail(line, fmt::format("'{}' is undefined", *u.s));
  }
  Fail(line, fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, TypeName(a),
                         TypeName(b)));
}

Value Repeat(const Value& seq, int64_t n, int line) {
  if (n < 0) n = 0;
  const auto times = static_cast<std::size_t>(n);
  if (seq.is_string()) {
    const std::size_t len = seq.s->size();
    CheckBytes(len != 0 && times > SIZE_MAX / len ? SIZE_MAX : len * times, "a repeated string");
    Charge(static_cast<int64_t>(len * times) / kBytesPerStep);
    std::string out;
    out.reserve(len * times);
    for (std::size_t k = 0; k < times; ++k) out += *seq.s;
    Value v = Value::Str(std::move(out));
    v.is_markup = seq.is_markup;
    return v;
  }
  const std::size_t len = seq.list->size();
  CheckItems(len != 0 && times > SIZE_MAX / len ? SIZE_MAX : len * times, "a repeated list");
  (void)line;
  std::vector<Value> out;
  out.reserve(len * times);
  for (std::size_t k = 0; k < times; ++k) out.insert(out.end(), seq.list->begin(), seq.list->end());
  return Value::List(std::move(out), seq.is_tuple);
}

// CPython's float_pow: its special cases, and OverflowError where pow() leaves the range.
Value FloatPow(double x, double y, int line) {
  if (y == 0) return Value::Float(1.0);
  if (std::isnan(x)) return Value::Float(x);
  if (std::isnan(y)) return Value::Float(x == 1.0 ? 1.0 : y);
  const bool y_odd = std::isfinite(y) && std::fmod(std::fabs(y), 2.0) == 1.0;
  if (std::isinf(y)) {
    x = std::fabs(x);
    if (x == 1.0) return Value::Float(1.0);
    return Value::Float((y > 0) == (x > 1.0) ? std::fabs(y) : 0.0);
  }
  if (std::isinf(x)) {
    if (y > 0) return Value::Float(y_odd ? x : std::fabs(x));
    return Value::Float(y_odd ? std::copysign(0.0, x) : 0.0);
  }
  if (x == 0) {
    if (y < 0) Fail(line, "0.0 cannot be raised to a negative power");
    return Value::Float(y_odd ? x : 0.0);
  }
  bool negate = false;
  if (x < 0) {
    if (y != std::floor(y)) {
      Fail(line,
           "a negative number raised to a fractional power is complex (Python's complex "
           "numbers are not supported)");
    }
    x = -x;
    negate = y_odd;
  }
  if (x == 1.0) return Value::Float(negate ? -1.0 : 1.0);
  double r = std::pow(x, y);
  if (std::isinf(r)) Fail(line, "(34, 'Numerical result out of range')");
  return Value::Float(negate ? -r : r);
}

// int ** int: exact, refused past 64 bits; a negative exponent is float_pow's.
Value IntPow(int64_t a, int64_t b, int line) {
  if (b < 0) return FloatPow(static_cast<double>(a), static_cast<double>(b), line);
  if (a == 0 || a == 1) return Value::Int(b == 0 ? 1 : a);
  if (a == -1) return Value::Int(b % 2 == 0 ? 1 : -1);
  __int128 r = 1;
  for (int64_t k = 0; k < b; ++k) {  // |a| >= 2: at most 63 rounds before it passes 64 bits
    r *= a;
    CheckedInt(r, line);
  }
  return Value::Int(CheckedInt(r, line));
}

// CPython's _float_div_mod: the remainder takes the divisor's sign, the quotient is snapped to
// the nearest integral value, zeros keep their signs.
std::pair<double, double> FloatDivMod(double x, double y) {
  double mod = std::fmod(x, y);
  double div = (x - mod) / y;
  if (mod != 0) {
    if ((y < 0) != (mod < 0)) {
      mod += y;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, y);
  }
  double floordiv;
  if (div != 0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, x / y);
  }
  return {floordiv, mod};
}

Value Numeric(const std::string& op, const Value& a, const Value& b, int line) {
  const bool ints = IsInt(a) && IsInt(b);
  if (op == "+")
    return ints ? Value::Int(CheckedInt(__int128{Int(a)} + Int(b), line))
                : Value::Float(Num(a) + Num(b));
  if (op == "-")
    return ints ? Value::Int(CheckedInt(__int128{Int(a)} - Int(b), line))
                : Value::Float(Num(a) - Num(b));
  if (op == "*")
    return ints ? Value::Int(CheckedInt(__int128{Int(a)} * Int(b), line))
                : Value::Float(Num(a) * Num(b));
  if (op == "/") {
    if (Num(b) == 0) Fail(line, "division by zero");
    // Python divides ints exactly and rounds once; long double holds every int64 exactly.
    if (ints) {
      return Value::Float(
          static_cast<double>(static_cast<long double>(Int(a)) / static_cast<long double>(Int(b))));
    }
    return Value::Float(Num(a) / Num(b));
  }
  if (op == "//" || op == "%") {
    if (Num(b) == 0)
      Fail(line, op == "//" ? "integer division or modulo by zero" : "modulo by zero");
    if (ints) {
      int64_t x = Int(a), y = Int(b);
      if (x == std::numeric_limits<int64_t>::min() && y == -1)
        Fail(line, "an integer result does not fit 64 bits");
      int64_t q = x / y, r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) {
        --q;
        r += y;
      }
      return Value::Int(op == "//" ? q : r);
    }
    auto [q, r] = FloatDivMod(Num(a), Num(b));
    return Value::Float(op == "//" ? q : r);
  }
  // **
  return ints ? IntPow(Int(a), Int(b), line) : FloatPow(Num(a), Num(b), line);
}

// a + b of two strings: Markup's __add__ escapes the plain one (markupsafe).
Value AddStrings(const Value& a, const Value& b) {
  const bool markup = a.is_markup || b.is_markup;
  const std::string x = markup && !a.is_markup ? HtmlEscape(*a.s) : *a.s;
  const std::string y = markup && !b.is_markup ? HtmlEscape(*b.s) : *b.s;
  CheckBytes(x.size() + y.size(), "a joined string");
  Value v = Value::Str(x + y);
  v.is_markup = markup;
  return v;
}

Value Arith(const std::string& op, const Value& a, const Value& b, int line) {
  if (op == "~") {
    std::string x = ToStr(a), y = ToStr(b);
    CheckBytes(x.size() + y.size(), "a joined string");
    return Value::Str(x + y);
  }
  if (a.is_number() && b.is_number()) return Numeric(op, a, b, line);
  if (op == "+") {
    if (a.is_string() && b.is_string()) return AddStrings(a, b);
    if (a.is_sequence() && b.is_sequence() && a.is_tuple == b.is_tuple) {
      CheckItems(a.list->size() + b.list->size(), "a joined list");
      std::vector<Value> out(*a.list);
      out.insert(out.end(), b.list->begin(), b.list->end());
      return Value::List(std::move(out), a.is_tuple);
    }
  }
  if (op == "*") {
    if ((a.is_string() || a.is_sequence()) && IsInt(b)) return Repeat(a, Int(b), line);
    if ((b.is_string() || b.is_sequence()) && IsInt(a)) return Repeat(b, Int(a), line);
  }
  if (op == "%" && a.is_string())
    Fail(line, "printf-style '%' formatting of strings is not supported");
  OperandError(op, a, b, line);
}

// Whether Jinja2's optimizer folds e into a constant (nodes.py's as_const): literals and what is
// made of them, filters included but those that take the context (map, select, ...).
bool Folds(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::kLiteral:
      return true;
    case Expr::Kind::kName:
    case Expr::Kind::kCall:
      return false;
    case Expr::Kind::kFilter:
      if (!e.kids[0] || e.name == "map" || e.name == "select" || e.name == "reject" ||
          e.name == "selectattr" || e.name == "rejectattr")
        return false;
      break;
    case Expr::Kind::kCond:
      if (!e.kids[2]) return false;
      break;
    default:
      break;
  }
  return std::all_of(e.kids.begin(), e.kids.end(),
                     [](const std::unique_ptr<Expr>& k) { return !k || Folds(*k); });
}

bool Contains(const Value& container, const Value& item, int line) {
  switch (container.kind) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!item.is_string())
        Fail(line,
             fmt::format("'in <string>' requires string as left operand, not {}", TypeName(item)));
      Charge(Cost(container));
      return container.s->find(*item.s) != std::string::npos;
    case Value::Kind::kList: {
      // A generator is consumed up to the item found (Iterate, UsedPartly).
      const std::vector<Value> items = Iterate(container, line);
      for (std::size_t k = 0; k < items.size(); ++k) {
        if (!Equal(items[k], item)) continue;
        if (k + 1 < items.size()) UsedPartly(container);
        return true;
      }
      return false;
    }
    case Value::Kind::kDict:
      if (container.is_namespace) break;
      return item.is_string() && container.dict->Find(*item.s) != nullptr;
    default:
      break;
  }
  Fail(line, fmt::format("argument of type '{}' is not iterable", TypeName(container)));
}

}  // namespace

Output Renderer::Run(const Program& p) {
  struct Active {  // this rendering's budget for the engine's functions, restored on any exit
    explicit Active(Renderer* r) : saved(t_rendering) { t_rendering = r; }
    ~Active() { t_rendering = saved; }
    Renderer* saved;
  } active(this);
  out_ = &result_.text;
  Exec(p.body);
  return std::move(result_);
}

Renderer::Flow Renderer::Exec(const Body& body) {
  for (const auto& node : body) {
    const Node& n = *node;
    Step(n.line);
    switch (n.kind) {
      case Node::Kind::kData:
        Emit(n.text, n.line);
        break;
      case Node::Kind::kPrint: {
        Value v = Eval(*n.expr);
        if (v.is_generator())
          Fail(
              n.line,
              "printing a generator (the output of map, select, ...) is not supported; add | list");
        Emit(ToStr(v), n.line);
        break;
      }
      case Node::Kind::kIf: {
        std::size_t k = 0;
        while (k < n.conds.size() && !Truthy(Eval(*n.conds[k]))) ++k;
        if (k < n.bodies.size()) {
          Flow f = Exec(n.bodies[k]);
          if (f != Flow::kNormal) return f;
        }
        break;
      }
      case Node::Kind::kFor:
        ExecFor(n);
        break;
      case Node::Kind::kSet:
        ExecSet(n);
        break;
      case Node::Kind::kSetBlock:
        frame_->vars.Set(n.targets[0], Value::Str(Capture(n.bodies[0])));
        break;
      case Node::Kind::kMacro: {
        auto m = std::make_shared<Macro>();
        m->name = n.text;
        m->repr = fmt::format("<Macro '{}'>", n.text);
        m->node = &n;
        m->closure = frame_;
        frame_->vars.Set(n.text, Value::Func(std::move(m)));
        break;
      }
      case Node::Kind::kBreak:
        return Flow::kBreak;
      case Node::Kind::kContinue:
        return Flow::kContinue;
      case Node::Kind::kGeneration: {
        // transformers' offsets: a block starts where the template's output is when the block
        // is rendered — the output so far, not a set / filter block's captured text, and for a
        // block inside another the outer one's start (Jinja renders a block's body whole before
        // it is output) — and ends its own length later. So spans never start out of order.
        const std::size_t start = generation_depth_ > 0 ? generation_start_ : result_.text.size();
        // transformers tracks a block only once something was rendered or tracked before it
        // (AssistantTracker.is_active() tests two lists that are both empty at the start).
        const bool active = start > 0 || !result_.generation.empty();
        const std::size_t before = out_->size();
        if (generation_depth_++ == 0) generation_start_ = start;
        Flow f = Exec(n.bodies[0]);
        --generation_depth_;
        if (active) result_.generation.emplace_back(start, start + (out_->size() - before));
        if (f != Flow::kNormal) return f;
        break;
      }
      case Node::Kind::kFilterBlock: {
        Value saved = filter_input_;
        filter_input_ = Value::Str(Capture(n.bodies[0]));
        Value v = Eval(*n.expr);
        filter_input_ = saved;
        Emit(ToStr(v), n.line);
        break;
      }
    }
  }
  return Flow::kNormal;
}

namespace {

// The `loop` object of iteration k of items (Jinja2's LoopContext, one level deep).
Value LoopObject(const std::vector<Value>& items, int64_t k) {
  const auto len = static_cast<int64_t>(items.size());
  Value loop = Value::MakeDict();
  Dict& l = *loop.dict;
  l.Set("index", Value::Int(k + 1));
  l.Set("index0", Value::Int(k));
  l.Set("revindex", Value::Int(len - k));
  l.Set("revindex0", Value::Int(len - k - 1));
  l.Set("first", Value::Bool(k == 0));
  l.Set("last", Value::Bool(k == len - 1));
  l.Set("length", Value::Int(len));
  l.Set("depth", Value::Int(1));
  l.Set("depth0", Value::Int(0));
  l.Set("previtem", k > 0 ? items[static_cast<std::size_t>(k - 1)] : Value::Undefined("previtem"));
  l.Set("nextitem",
        k + 1 < len ? items[static_cast<std::size_t>(k + 1)] : Value::Undefined("nextitem"));
  auto cycle = std::make_shared<Cycle>();
  cycle->name = "loop.cycle";
  cycle->index0 = k;
  l.Set("cycle", Value::Func(std::move(cycle)));
  return loop;
}

}  // namespace

Renderer::Flow Renderer::ExecFor(const Node& n) {
  const Value iterable = Eval(*n.expr);
  std::vector<Value> items = Iterate(iterable, n.line);
  if (!n.conds.empty()) {  // for x in xs if cond: filtered before loop.length is known
    std::vector<Value> kept;
    for (Value& v : items) {
      auto f = std::make_shared<Frame>();
      f->parent = frame_;
      Unpack(n.targets, v, &f->vars, n.line);
      std::swap(frame_, f);
      Step(n.line);
      bool keep = Truthy(Eval(*n.conds[0]));
      std::swap(frame_, f);
      if (keep) kept.push_back(std::move(v));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    if (n.bodies.size() > 1) return Exec(n.bodies[1]);
    return Flow::kNormal;
  }
  const auto len = static_cast<int64_t>(items.size());
  std::shared_ptr<Frame> outer = frame_;
  for (int64_t k = 0; k < len; ++k) {
    // Every iteration counts, whatever its body (an empty one too), as the work it does: its
    // frame, and the loop object where the body names it.
    line_ = n.line;
    Charge(n.uses_loop ? kLoopObjectSteps : kIterationSteps);
    frame_ = std::make_shared<Frame>();
    frame_->parent = outer;
    if (n.uses_loop) frame_->vars.Set("loop", LoopObject(items, k));
    Unpack(n.targets, items[static_cast<std::size_t>(k)], &frame_->vars, n.line);
    Flow f = Exec(n.bodies[0]);
    frame_ = outer;
    if (f == Flow::kBreak) {
      if (k + 1 < len) UsedPartly(iterable);  // Python's generator keeps the rest
      break;
    }
  }
  return Flow::kNormal;
}

void Renderer::ExecSet(const Node& n) {
  Value v = Eval(*n.expr);
  if (n.text.empty()) {
    Unpack(n.targets, v, &frame_->vars, n.line);
    return;
  }
  Value ns = Lookup(n.targets[0]);
  if (!ns.is_dict() || !ns.is_namespace) {
    Fail(n.line, fmt::format("cannot assign attribute on non-namespace object '{}'", n.targets[0]));
  }
  ns.dict->Set(n.text, std::move(v));
}

std::string Renderer::Capture(const Body& body) {
  std::string buf;
  std::string* saved = out_;
  out_ = &buf;
  Exec(body);  // break/continue cannot cross a capture (the parser keeps them in their loop)
  out_ = saved;
  return buf;
}

Value Renderer::CallMacro(const Node& macro, const std::shared_ptr<Frame>& closure, Args& args,
                          int line) {
  if (++call_depth_ > kMaxCallDepth)
    Fail(line, fmt::format("macros call each other deeper than {}", kMaxCallDepth));
  const auto& params = macro.targets;
  if (args.pos.size() > params.size()) {
    Fail(line,
         fmt::format("macro '{}' takes not more than {} argument(s)", macro.text, params.size()));
  }
  auto f = std::make_shared<Frame>();
  f->parent = closure;
  std::vector<bool> given(params.size(), false);
  for (std::size_t k = 0; k < args.pos.size(); ++k) {
    f->vars.Set(params[k], args.pos[k]);
    given[k] = true;
  }
  for (auto& [name, v] : args.kw) {
    std::size_t k = 0;
    while (k < params.size() && params[k] != name) ++k;
    if (k == params.size())
      Fail(line, fmt::format("macro '{}' takes no keyword argument '{}'", macro.text, name));
    f->vars.Set(name, v);
    given[k] = true;
  }
  std::shared_ptr<Frame> saved = frame_;
  frame_ = f;
  const std::size_t first_default = params.size() - macro.conds.size();
  for (std::size_t k = 0; k < params.size(); ++k) {
    if (given[k]) continue;
    f->vars.Set(params[k], k >= first_default ? Eval(*macro.conds[k - first_default])
                                              : Value::Undefined(params[k]));
  }
  std::string text = Capture(macro.bodies[0]);
  frame_ = saved;
  --call_depth_;
  return Value::Str(std::move(text));
}

Value Renderer::Lookup(const std::string& name) const {
  for (const Frame* f = frame_.get(); f != nullptr; f = f->parent.get()) {
    if (const Value* v = f->vars.Find(name)) return *v;
  }
  if (const Value* v = context_.Find(name)) return *v;
  Value g = Global(name);
  if (!g.is_undefined()) return g;
  return Value::Undefined(name);
}

Value Renderer::Eval(const Expr& e) {
  Value v = EvalNode(e);
  // Values nest only as deep as kMaxValueDepth, so that comparing, printing and freeing them
  // stays within the stack (a loop of `set ns.l = [ns.l]` would nest one deeper per step).
  const uint16_t depth = v.is_list() ? v.depth : v.is_dict() && !v.is_namespace ? v.dict->depth : 0;
  if (depth > kMaxValueDepth) {
    Fail(e.line,
         fmt::format("a value nests lists and dicts deeper than {} levels", kMaxValueDepth));
  }
  return v;
}

Value Renderer::EvalNode(const Expr& e) {
  Step(e.line);
  switch (e.kind) {
    case Expr::Kind::kLiteral:
      return e.value;
    case Expr::Kind::kName:
      return Lookup(e.name);
    case Expr::Kind::kList:
    case Expr::Kind::kTuple:
    case Expr::Kind::kDict:
      return EvalCollection(e);
    case Expr::Kind::kAttr:
      return GetAttr(Eval(*e.kids[0]), e.name, e.line);
    case Expr::Kind::kItem:
      return GetItem(Eval(*e.kids[0]), Eval(*e.kids[1]), e.line);
    case Expr::Kind::kSlice: {
      Value obj = Eval(*e.kids[0]);
      Args a;
      for (int k = 1; k <= 3; ++k) a.pos.push_back(e.kids[k] ? Eval(*e.kids[k]) : Value::None());
      return ApplyFilter("__slice__", obj, a, e.line);
    }
    case Expr::Kind::kCall:
      return EvalCall(e);
    case Expr::Kind::kFilter:
      return EvalFilter(e);
    case Expr::Kind::kTest: {
      Value v = Eval(*e.kids[0]);
      Args a = EvalArgs(e, 1);
      return Value::Bool(ApplyTest(e.name, v, a, e.line) != e.negate);
    }
    case Expr::Kind::kNeg:
    case Expr::Kind::kPos: {
      Value v = Eval(*e.kids[0]);
      if (!v.is_number())
        Fail(e.line, fmt::format("bad operand type for unary {}: '{}'",
                                 e.kind == Expr::Kind::kNeg ? '-' : '+', TypeName(v)));
      if (e.kind == Expr::Kind::kPos) return IsInt(v) ? Value::Int(Int(v)) : v;
      return IsInt(v) ? Value::Int(CheckedInt(-__int128{Int(v)}, e.line)) : Value::Float(-v.f);
    }
    case Expr::Kind::kNot:
      return Value::Bool(!Truthy(Eval(*e.kids[0])));
    case Expr::Kind::kAnd: {
      Value a = Eval(*e.kids[0]);
      return Truthy(a) ? Eval(*e.kids[1]) : a;
    }
    case Expr::Kind::kOr: {
      Value a = Eval(*e.kids[0]);
      return Truthy(a) ? a : Eval(*e.kids[1]);
    }
    case Expr::Kind::kBinary: {
      Value a = Eval(*e.kids[0]);
      Value b = Eval(*e.kids[1]);
      if (e.name == "**" && a.is_number() && Num(a) < 0 && Folds(*e.kids[0]) &&
          !Folds(*e.kids[1])) {
        // Jinja2 folds a constant base and writes it into the Python it compiles without
        // parentheses: `-1 ** n` then runs as Python's -(1 ** n).
        Value abs_a =
            IsInt(a) ? Value::Int(CheckedInt(-__int128{Int(a)}, e.line)) : Value::Float(-Num(a));
        return Arith("-", Value::Int(0), Arith("**", abs_a, b, e.line), e.line);
      }
      return Arith(e.name, a, b, e.line);
    }
    case Expr::Kind::kCompare:
      return EvalCompare(e);
    case Expr::Kind::kCond:
      if (Truthy(Eval(*e.kids[0]))) return Eval(*e.kids[1]);
      return e.kids[2] ? Eval(*e.kids[2]) : Value::Undefined("the else branch");
  }
  return Value::Undefined();
}

Value Renderer::EvalCollection(const Expr& e) {
  if (e.kind != Expr::Kind::kDict) {
    std::vector<Value> items;
    for (const auto& k : e.kids) items.push_back(Eval(*k));
    return Value::List(std::move(items), e.kind == Expr::Kind::kTuple);
  }
  Value d = Value::MakeDict();
  for (std::size_t k = 0; k + 1 < e.kids.size(); k += 2) {
    Value key = Eval(*e.kids[k]);
    if (!key.is_string())
      Fail(e.line,
           fmt::format("dict keys other than strings are not supported (got {})", TypeName(key)));
    d.dict->Set(*key.s, Eval(*e.kids[k + 1]));
  }
  return d;
}

Args Renderer::EvalArgs(const Expr& e, std::size_t first) {
  Args a;
  const std::size_t n_kw = e.kw.size();
  const std::size_t n_pos = e.kids.size() - first - n_kw;
  for (std::size_t k = 0; k < n_pos; ++k) a.pos.push_back(Eval(*e.kids[first + k]));
  for (std::size_t k = 0; k < n_kw; ++k)
    a.kw.emplace_back(e.kw[k], Eval(*e.kids[first + n_pos + k]));
  return a;
}

Value Renderer::EvalCall(const Expr& e) {
  Value callee = Eval(*e.kids[0]);
  Args a = EvalArgs(e, 1);
  if (callee.is_undefined()) Fail(e.line, fmt::format("'{}' is undefined", *callee.s));
  if (callee.kind != Value::Kind::kFunc)
    Fail(e.line, fmt::format("'{}' object is not callable", TypeName(callee)));
  return callee.func->Call(*this, a, e.line);
}

Value Renderer::EvalFilter(const Expr& e) {
  Value input = e.kids[0] ? Eval(*e.kids[0]) : filter_input_;
  Args a = EvalArgs(e, 1);
  return ApplyFilter(e.name, input, a, e.line);
}

Value Renderer::EvalCompare(const Expr& e) {
  Value left = Eval(*e.kids[0]);
  for (std::size_t k = 0; k < e.ops.size(); ++k) {
    Value right = Eval(*e.kids[k + 1]);
    const std::string& op = e.ops[k];
    Charge(Cost(left) + Cost(right));
    bool r;
    if (op == "==") {
      r = Equal(left, right);
    } else if (op == "!=") {
      r = !Equal(left, right);
    } else if (op == "in" || op == "notin") {
      r = Contains(right, left, e.line) == (op == "in");
    } else {
      if (left.is_undefined() || right.is_undefined()) OperandError(op, left, right, e.line);
      const int c = Compare(left, right, e.line);  // 2: unordered (a NaN): every test false
      r = op == "<"    ? c == -1
          : op == "<=" ? c == -1 || c == 0
          : op == ">"  ? c == 1
                       : c == 1 || c == 0;
    }
    if (!r) return Value::Bool(false);
    left = std::move(right);
  }
  return Value::Bool(true);
}

Output Render(const Program& program, const Dict& context, const Limits& limits) {
  return Renderer(context, limits).Run(program);
}

void Charge(int64_t steps) {
  if (t_rendering != nullptr) t_rendering->Charge(steps);
}
void CheckBytes(std::size_t bytes, const char* what) {
  if (t_rendering != nullptr) t_rendering->CheckBytes(bytes, what);
}
void CheckItems(std::size_t items, const char* what) {
  if (t_rendering != nullptr) t_rendering->CheckItems(items, what);
}
int CurrentLine() { return t_rendering != nullptr ? t_rendering->line() : 0; }
void TrackNamespace(std::shared_ptr<Dict> d) {
  if (t_rendering != nullptr) t_rendering->TrackNamespace(std::move(d));
}

}  // namespace cputrain::chat::jinja
