// Renders a parsed template (jinja.h): statements, expressions, scoping, macros, and the
// {% generation %} offsets transformers turns into assistant masks.
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
  Output Run(const Program& p);
  Value CallMacro(const Node& macro, const std::shared_ptr<Frame>& closure, Args& args, int line);

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  Flow Exec(const Body& body);
  Flow ExecFor(const Node& n);
  void ExecSet(const Node& n);
  std::string Capture(const Body& body);
  Value Eval(const Expr& e);
  Value EvalCall(const Expr& e);
  Value EvalFilter(const Expr& e);
  Value EvalCompare(const Expr& e);
  Value EvalCollection(const Expr& e);
  Args EvalArgs(const Expr& e, std::size_t first);
  Value Lookup(const std::string& name) const;
  void Step(int line) {
    if (++steps_ > limits_.max_steps) {
      Fail(line, fmt::format("the template ran more than {} steps", limits_.max_steps));
    }
  }
  void Emit(std::string_view s, int line) {
    if (out_->size() + s.size() > limits_.max_output) {
      Fail(line, fmt::format("the template's output passed {} bytes", limits_.max_output));
    }
    out_->append(s);
  }

  const Dict& context_;
  const Limits& limits_;
  std::shared_ptr<Frame> frame_;
  std::string* out_ = nullptr;
  Output result_;
  int64_t steps_ = 0;
  int call_depth_ = 0;
  Value filter_input_;  // the captured body in a {% filter %} block
  // {% generation %} blocks open now, and where the outermost one began in the output.
  int generation_depth_ = 0;
  std::size_t generation_start_ = 0;
};

namespace {

constexpr int kMaxCallDepth = 64;

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

Value Repeat(const Value& seq, int64_t n, int line, std::size_t max_output) {
  if (n < 0) n = 0;
  if (seq.is_string()) {
    if (static_cast<double>(seq.s->size()) * static_cast<double>(n) >
        static_cast<double>(max_output)) {
      Fail(line, "a repeated string would pass the output limit");
    }
    std::string out;
    for (int64_t k = 0; k < n; ++k) out += *seq.s;
    return Value::Str(std::move(out));
  }
  if (static_cast<double>(seq.list->size()) * static_cast<double>(n) > 1e6)
    Fail(line, "a repeated list would pass a million items");
  std::vector<Value> out;
  for (int64_t k = 0; k < n; ++k) out.insert(out.end(), seq.list->begin(), seq.list->end());
  return Value::List(std::move(out), seq.is_tuple);
}

Value Arith(const std::string& op, const Value& a, const Value& b, int line,
            std::size_t max_output) {
  if (op == "~") return Value::Str(ToStr(a) + ToStr(b));
  if (a.is_number() && b.is_number()) {
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
      double x = Num(a), y = Num(b);
      double m = std::fmod(x, y);
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      return op == "//" ? Value::Float(std::floor((x - m) / y + 0.5)) : Value::Float(m);
    }
    if (op == "**") {
      if (ints && Int(b) >= 0) {
        __int128 r = 1;
        for (int64_t k = 0; k < Int(b); ++k) {
          r *= Int(a);
          CheckedInt(r, line);
          if (r == 0 || r == 1) break;
        }
        return Value::Int(CheckedInt(r, line));
      }
      return Value::Float(std::pow(Num(a), Num(b)));
    }
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) return Value::Str(*a.s + *b.s);
    if (a.is_list() && b.is_list() && a.is_tuple == b.is_tuple && !a.is_iterator &&
        !b.is_iterator) {
      std::vector<Value> out(*a.list);
      out.insert(out.end(), b.list->begin(), b.list->end());
      return Value::List(std::move(out), a.is_tuple);
    }
  }
  if (op == "*") {
    if ((a.is_string() || (a.is_list() && !a.is_iterator)) && IsInt(b))
      return Repeat(a, Int(b), line, max_output);
    if ((b.is_string() || (b.is_list() && !b.is_iterator)) && IsInt(a))
      return Repeat(b, Int(a), line, max_output);
  }
  if (op == "%" && a.is_string())
    Fail(line, "printf-style '%' formatting of strings is not supported");
  OperandError(op, a, b, line);
}

bool Contains(const Value& container, const Value& item, int line) {
  switch (container.kind) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!item.is_string())
        Fail(line,
             fmt::format("'in <string>' requires string as left operand, not {}", TypeName(item)));
      return container.s->find(*item.s) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& v : *container.list) {
        if (Equal(v, item)) return true;
      }
      return false;
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
        if (v.is_iterator)
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

Renderer::Flow Renderer::ExecFor(const Node& n) {
  std::vector<Value> items = Iterate(Eval(*n.expr), n.line);
  if (!n.conds.empty()) {  // for x in xs if cond: filtered before loop.length is known
    std::vector<Value> kept;
    for (Value& v : items) {
      auto f = std::make_shared<Frame>();
      f->parent = frame_;
      Unpack(n.targets, v, &f->vars, n.line);
      std::swap(frame_, f);
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
  const int64_t len = static_cast<int64_t>(items.size());
  std::shared_ptr<Frame> outer = frame_;
  for (int64_t k = 0; k < len; ++k) {
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
    l.Set("previtem",
          k > 0 ? items[static_cast<std::size_t>(k - 1)] : Value::Undefined("previtem"));
    l.Set("nextitem",
          k + 1 < len ? items[static_cast<std::size_t>(k + 1)] : Value::Undefined("nextitem"));
    auto cycle = std::make_shared<Cycle>();
    cycle->name = "loop.cycle";
    cycle->index0 = k;
    l.Set("cycle", Value::Func(std::move(cycle)));
    frame_ = std::make_shared<Frame>();
    frame_->parent = outer;
    frame_->vars.Set("loop", loop);
    Unpack(n.targets, items[static_cast<std::size_t>(k)], &frame_->vars, n.line);
    Flow f = Exec(n.bodies[0]);
    frame_ = outer;
    if (f == Flow::kBreak) break;
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
      return Arith(e.name, a, b, e.line, limits_.max_output);
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
    bool r;
    if (op == "==") {
      r = Equal(left, right);
    } else if (op == "!=") {
      r = !Equal(left, right);
    } else if (op == "in" || op == "notin") {
      r = Contains(right, left, e.line) == (op == "in");
    } else {
      if (left.is_undefined() || right.is_undefined()) OperandError(op, left, right, e.line);
      int c = Compare(left, right, e.line);
      r = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
    }
    if (!r) return Value::Bool(false);
    left = std::move(right);
  }
  return Value::Bool(true);
}

Output Render(const Program& program, const Dict& context, const Limits& limits) {
  return Renderer(context, limits).Run(program);
}

}  // namespace cputrain::chat::jinja
