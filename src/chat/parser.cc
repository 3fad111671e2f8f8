// Jinja2's parser (jinja2/parser.py, 3.1) for the statements and expressions chat templates
// use, with transformers' two extensions: loop controls ({% break %}, {% continue %}) and
// {% generation %}. Precedence, lowest first, as Jinja2's: a if b else c; or; and; not;
// comparisons (== != < <= > >= in, not in); + -; ~; * / // %; **; unary - +; then the primary
// with its postfixes (.name, [i], [a:b:c], (args)) followed by filters (| f) and tests (is t),
// so `-x | abs` is (-x) | abs and `not x is none` is not (x is none).
#include <algorithm>
#include <string>

#include "chat/jinja.h"
#include "fmt/format.h"

namespace cputrain::chat::jinja {
namespace {

using K = Token::Kind;

// Nesting deeper than this is refused: the parser and the renderer recurse once per level.
constexpr int kMaxDepth = 200;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}
  Program Run();

 private:
  // Statements. ParseBody stops at a {% tag %} whose name is in `ends` (left unconsumed after
  // the {%), or at the end when `ends` is empty.
  Body ParseBody(const std::vector<std::string>& ends);
  std::unique_ptr<Node> ParseStatement();
  std::unique_ptr<Node> ParseFor(int line);
  std::unique_ptr<Node> ParseIf(int line);
  std::unique_ptr<Node> ParseSet(int line);
  std::unique_ptr<Node> ParseMacro(int line);
  std::unique_ptr<Node> MakeNode(Node::Kind kind, int line);
  void EndBlock();                       // %}
  void EndTag(const std::string& name);  // {% name %} after ParseBody stopped at it

  // Expressions.
  std::unique_ptr<Expr> ParseTuple(bool with_condexpr);
  std::unique_ptr<Expr> ParseExpression(bool with_condexpr = true);
  std::unique_ptr<Expr> ParseOr();
  std::unique_ptr<Expr> ParseAnd();
  std::unique_ptr<Expr> ParseNot();
  std::unique_ptr<Expr> ParseCompare();
  std::unique_ptr<Expr> ParseMath1();
  std::unique_ptr<Expr> ParseConcat();
  std::unique_ptr<Expr> ParseMath2();
  std::unique_ptr<Expr> ParsePow();
  std::unique_ptr<Expr> ParseUnary(bool with_filter);
  std::unique_ptr<Expr> ParsePrimary();
  std::unique_ptr<Expr> ParsePostfix(std::unique_ptr<Expr> node);
  std::unique_ptr<Expr> ParseFilterExpr(std::unique_ptr<Expr> node);
  std::unique_ptr<Expr> ParseFilter(std::unique_ptr<Expr> node);
  std::unique_ptr<Expr> ParseTest(std::unique_ptr<Expr> node);
  std::unique_ptr<Expr> ParseSubscript(std::unique_ptr<Expr> node);
  void ParseCallArgs(Expr* call);  // after '('; consumes ')'
  std::string DottedName();

  std::unique_ptr<Expr> MakeExpr(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }
  const Token& Cur() const { return t_[i_]; }
  const Token& Next() { return t_[i_ < t_.size() - 1 ? i_++ : i_]; }
  bool IsOp(const char* op) const { return Cur().kind == K::kOp && Cur().text == op; }
  bool IsName(const char* name) const { return Cur().kind == K::kName && Cur().text == name; }
  bool IsNameAt(std::size_t k, const char* name) const {
    return i_ + k < t_.size() && t_[i_ + k].kind == K::kName && t_[i_ + k].text == name;
  }
  bool SkipOp(const char* op) {
    if (!IsOp(op)) return false;
    Next();
    return true;
  }
  bool SkipName(const char* name) {
    if (!IsName(name)) return false;
    Next();
    return true;
  }
  void ExpectOp(const char* op) {
    if (!SkipOp(op)) Fail(Cur().line, fmt::format("expected '{}', got {}", op, Describe(Cur())));
  }
  std::string ExpectName() {
    if (Cur().kind != K::kName)
      Fail(Cur().line, fmt::format("expected a name, got {}", Describe(Cur())));
    return Next().text;
  }
  static std::string Describe(const Token& t);
  struct DepthGuard {
    DepthGuard(Parser* p, int line) : p(p) {
      if (++p->depth_ > kMaxDepth)
        Fail(line, fmt::format("the template nests deeper than {} levels", kMaxDepth));
    }
    ~DepthGuard() { --p->depth_; }
    Parser* p;
  };

  std::vector<Token> t_;
  std::size_t i_ = 0;
  int depth_ = 0;
  int loops_ = 0;   // for-loops around the current statement (break/continue need one)
  int macros_ = 0;  // macro bodies around it
};

std::string Parser::Describe(const Token& t) {
  switch (t.kind) {
    case K::kData:
      return "template text";
    case K::kPrintBegin:
      return "'{{'";
    case K::kPrintEnd:
      return "'}}'";
    case K::kBlockBegin:
      return "'{%'";
    case K::kBlockEnd:
      return "'%}'";
    case K::kName:
      return fmt::format("'{}'", t.text);
    case K::kString:
      return "a string";
    case K::kInt:
    case K::kFloat:
      return "a number";
    case K::kOp:
      return fmt::format("'{}'", t.text);
    case K::kEnd:
      return "the end of the template";
  }
  return "?";
}

Program Parser::Run() {
  Program p;
  p.body = ParseBody({});
  return p;
}

std::unique_ptr<Node> Parser::MakeNode(Node::Kind kind, int line) {
  auto n = std::make_unique<Node>();
  n->kind = kind;
  n->line = line;
  return n;
}

Body Parser::ParseBody(const std::vector<std::string>& ends) {
  DepthGuard guard(this, Cur().line);
  Body body;
  for (;;) {
    const Token& t = Cur();
    if (t.kind == K::kEnd) {
      if (!ends.empty()) {
        Fail(t.line, fmt::format("the template ends where {{% {} %}} was expected", ends.front()));
      }
      return body;
    }
    if (t.kind == K::kData) {
      auto n = MakeNode(Node::Kind::kData, t.line);
      n->text = t.text;
      body.push_back(std::move(n));
      Next();
    } else if (t.kind == K::kPrintBegin) {
      Next();
      auto n = MakeNode(Node::Kind::kPrint, t.line);
      n->expr = ParseTuple(true);
      if (Cur().kind != K::kPrintEnd)
        Fail(Cur().line, fmt::format("expected '}}}}', got {}", Describe(Cur())));
      Next();
      body.push_back(std::move(n));
    } else if (t.kind == K::kBlockBegin) {
      const Token& name = t_[i_ + 1];
      if (name.kind == K::kName) {
        for (const std::string& e : ends) {
          if (name.text == e) {
            Next();  // {%: the caller reads the name
            return body;
          }
        }
      }
      Next();
      body.push_back(ParseStatement());
    } else {
      Fail(t.line, fmt::format("unexpected {}", Describe(t)));
    }
  }
}

void Parser::EndBlock() {
  if (Cur().kind != K::kBlockEnd)
    Fail(Cur().line, fmt::format("expected '%}}', got {}", Describe(Cur())));
  Next();
}

void Parser::EndTag(const std::string& name) {
  if (ExpectName() != name) Fail(Cur().line, fmt::format("expected {{% {} %}}", name));
  EndBlock();
}

std::unique_ptr<Node> Parser::ParseStatement() {
  const Token& t = Cur();
  if (t.kind != K::kName)
    Fail(t.line, fmt::format("expected a statement name after '{{%', got {}", Describe(t)));
  const std::string name = t.text;
  const int line = t.line;
  Next();
  if (name == "for") return ParseFor(line);
  if (name == "if") return ParseIf(line);
  if (name == "set") return ParseSet(line);
  if (name == "macro") return ParseMacro(line);
  if (name == "print") {
    auto n = MakeNode(Node::Kind::kPrint, line);
    n->expr = ParseTuple(true);
    EndBlock();
    return n;
  }
  if (name == "break" || name == "continue") {
    if (loops_ == 0) Fail(line, fmt::format("{{% {} %}} outside a for loop", name));
    EndBlock();
    return MakeNode(name == "break" ? Node::Kind::kBreak : Node::Kind::kContinue, line);
  }
  if (name == "generation") {
    if (macros_ > 0) {
      Fail(line,
           "{% generation %} inside a macro is not supported (transformers measures its "
           "offsets in the template's output, which a macro's is not)");
    }
    EndBlock();
    auto n = MakeNode(Node::Kind::kGeneration, line);
    n->bodies.push_back(ParseBody({"endgeneration"}));
    EndTag("endgeneration");
    return n;
  }
  if (name == "filter") {
    auto n = MakeNode(Node::Kind::kFilterBlock, line);
    n->expr = ParseFilter(nullptr);
    EndBlock();
    // Its body is captured; a {% generation %} in it is measured where the block is rendered
    // (render.cc), as transformers measures it.
    n->bodies.push_back(ParseBody({"endfilter"}));
    EndTag("endfilter");
    return n;
  }
  static const char* kKnownUnsupported[] = {"include",    "import", "from", "extends",
                                            "block",      "call",   "raw",  "with",
                                            "autoescape", "do",     "trans"};
  for (const char* u : kKnownUnsupported) {
    if (name == u) {
      Fail(line, fmt::format("the {{% {} %}} statement is not supported in chat templates here "
                             "(supported: for, if, set, macro, filter, print, break, continue, "
                             "generation)",
                             name));
    }
  }
  Fail(line, fmt::format("unknown tag '{}'", name));
}

bool Names(const Expr& e, const std::string& name) {
  if (e.kind == Expr::Kind::kName && e.name == name) return true;
  return std::any_of(e.kids.begin(), e.kids.end(),
                     [&](const std::unique_ptr<Expr>& k) { return k && Names(*k, name); });
}

// Whether `name` is read anywhere in body (its nested statements and macros included).
bool Names(const Body& body, const std::string& name) {
  for (const auto& n : body) {
    if (n->expr && Names(*n->expr, name)) return true;
    for (const auto& c : n->conds) {
      if (c && Names(*c, name)) return true;
    }
    for (const Body& b : n->bodies) {
      if (Names(b, name)) return true;
    }
  }
  return false;
}

std::unique_ptr<Node> Parser::ParseFor(int line) {
  auto n = MakeNode(Node::Kind::kFor, line);
  bool paren = SkipOp("(");
  for (;;) {
    n->targets.push_back(ExpectName());
    if (!SkipOp(",")) break;
    if (IsName("in") || IsOp(")")) break;
  }
  if (paren) ExpectOp(")");
  if (!SkipName("in"))
    Fail(Cur().line, fmt::format("expected 'in' in the for loop, got {}", Describe(Cur())));
  n->expr = ParseTuple(false);
  if (SkipName("if")) n->conds.push_back(ParseExpression());
  if (IsName("recursive")) Fail(line, "recursive for loops are not supported");
  EndBlock();
  ++loops_;
  n->bodies.push_back(ParseBody({"endfor", "else"}));
  --loops_;
  n->uses_loop = Names(n->bodies[0], "loop");
  if (SkipName("else")) {
    EndBlock();
    n->bodies.push_back(ParseBody({"endfor"}));
  }
  EndTag("endfor");
  return n;
}

std::unique_ptr<Node> Parser::ParseIf(int line) {
  auto n = MakeNode(Node::Kind::kIf, line);
  n->conds.push_back(ParseTuple(false));
  EndBlock();
  for (;;) {
    n->bodies.push_back(ParseBody({"elif", "else", "endif"}));
    if (SkipName("elif")) {
      n->conds.push_back(ParseTuple(false));
      EndBlock();
      continue;
    }
    if (SkipName("else")) {
      EndBlock();
      n->bodies.push_back(ParseBody({"endif"}));
    }
    EndTag("endif");
    return n;
  }
}

std::unique_ptr<Node> Parser::ParseSet(int line) {
  std::string first = ExpectName();
  if (SkipOp(".")) {  // {% set ns.attr = value %}
    auto n = MakeNode(Node::Kind::kSet, line);
    n->targets.push_back(first);
    n->text = ExpectName();
    ExpectOp("=");
    n->expr = ParseTuple(true);
    EndBlock();
    return n;
  }
  std::vector<std::string> targets{first};
  while (SkipOp(",")) targets.push_back(ExpectName());
  if (targets.size() == 1 && Cur().kind == K::kBlockEnd) {  // {% set x %}...{% endset %}
    EndBlock();
    auto n = MakeNode(Node::Kind::kSetBlock, line);
    n->targets = targets;
    n->bodies.push_back(ParseBody({"endset"}));  // captured, as a filter block's
    EndTag("endset");
    return n;
  }
  if (IsOp("|")) Fail(line, "a filter on a {% set %} block is not supported");
  ExpectOp("=");
  auto n = MakeNode(Node::Kind::kSet, line);
  n->targets = std::move(targets);
  n->expr = ParseTuple(true);
  EndBlock();
  return n;
}

std::unique_ptr<Node> Parser::ParseMacro(int line) {
  auto n = MakeNode(Node::Kind::kMacro, line);
  n->text = ExpectName();
  ExpectOp("(");
  while (!SkipOp(")")) {
    if (!n->targets.empty()) ExpectOp(",");
    if (SkipOp(")")) break;
    n->targets.push_back(ExpectName());
    if (SkipOp("=")) {
      n->conds.push_back(ParseExpression());
    } else if (!n->conds.empty()) {
      Fail(line, "a macro parameter without a default follows one with a default");
    }
  }
  EndBlock();
  ++macros_;
  int saved_loops = loops_;
  loops_ = 0;
  n->bodies.push_back(ParseBody({"endmacro"}));
  loops_ = saved_loops;
  --macros_;
  EndTag("endmacro");
  return n;
}

// ---- expressions --------------------------------------------------------------------------

std::unique_ptr<Expr> Parser::ParseTuple(bool with_condexpr) {
  const int line = Cur().line;
  auto first = ParseExpression(with_condexpr);
  if (!IsOp(",")) return first;
  auto tuple = MakeExpr(Expr::Kind::kTuple, line);
  tuple->kids.push_back(std::move(first));
  while (SkipOp(",")) {
    if (Cur().kind == K::kPrintEnd || Cur().kind == K::kBlockEnd || IsOp(")") || IsName("if"))
      break;
    tuple->kids.push_back(ParseExpression(with_condexpr));
  }
  return tuple;
}

std::unique_ptr<Expr> Parser::ParseExpression(bool with_condexpr) {
  DepthGuard guard(this, Cur().line);
  auto expr = ParseOr();
  if (!with_condexpr) return expr;
  while (IsName("if")) {
    const int line = Cur().line;
    Next();
    auto cond = MakeExpr(Expr::Kind::kCond, line);
    cond->kids.push_back(ParseOr());
    cond->kids.push_back(std::move(expr));
    cond->kids.push_back(SkipName("else") ? ParseExpression() : nullptr);
    expr = std::move(cond);
  }
  return expr;
}

std::unique_ptr<Expr> Parser::ParseOr() {
  auto left = ParseAnd();
  while (IsName("or")) {
    auto e = MakeExpr(Expr::Kind::kOr, Next().line);
    e->kids.push_back(std::move(left));
    e->kids.push_back(ParseAnd());
    left = std::move(e);
  }
  return left;
}

std::unique_ptr<Expr> Parser::ParseAnd() {
  auto left = ParseNot();
  while (IsName("and")) {
    auto e = MakeExpr(Expr::Kind::kAnd, Next().line);
    e->kids.push_back(std::move(left));
    e->kids.push_back(ParseNot());
    left = std::move(e);
  }
  return left;
}

std::unique_ptr<Expr> Parser::ParseNot() {
  if (IsName("not")) {
    DepthGuard guard(this, Cur().line);
    auto e = MakeExpr(Expr::Kind::kNot, Next().line);
    e->kids.push_back(ParseNot());
    return e;
  }
  return ParseCompare();
}

std::unique_ptr<Expr> Parser::ParseCompare() {
  const int line = Cur().line;
  auto first = ParseMath1();
  std::unique_ptr<Expr> cmp;
  for (;;) {
    std::string op;
    if (Cur().kind == K::kOp && (Cur().text == "==" || Cur().text == "!=" || Cur().text == "<" ||
                                 Cur().text == "<=" || Cur().text == ">" || Cur().text == ">=")) {
      op = Next().text;
    } else if (IsName("in")) {
      Next();
      op = "in";
    } else if (IsName("not") && IsNameAt(1, "in")) {
      Next();
      Next();
      op = "notin";
    } else {
      break;
    }
    if (!cmp) {
      cmp = MakeExpr(Expr::Kind::kCompare, line);
      cmp->kids.push_back(std::move(first));
    }
    cmp->ops.push_back(op);
    cmp->kids.push_back(ParseMath1());
  }
  return cmp ? std::move(cmp) : std::move(first);
}

std::unique_ptr<Expr> Parser::ParseMath1() {
  auto left = ParseConcat();
  while (IsOp("+") || IsOp("-")) {
    auto e = MakeExpr(Expr::Kind::kBinary, Cur().line);
    e->name = Next().text;
    e->kids.push_back(std::move(left));
    e->kids.push_back(ParseConcat());
    left = std::move(e);
  }
  return left;
}

std::unique_ptr<Expr> Parser::ParseConcat() {
  auto left = ParseMath2();
  while (IsOp("~")) {
    auto e = MakeExpr(Expr::Kind::kBinary, Next().line);
    e->name = "~";
    e->kids.push_back(std::move(left));
    e->kids.push_back(ParseMath2());
    left = std::move(e);
  }
  return left;
}

std::unique_ptr<Expr> Parser::ParseMath2() {
  auto left = ParsePow();
  while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
    auto e = MakeExpr(Expr::Kind::kBinary, Cur().line);
    e->name = Next().text;
    e->kids.push_back(std::move(left));
    e->kids.push_back(ParsePow());
    left = std::move(e);
  }
  return left;
}

std::unique_ptr<Expr> Parser::ParsePow() {
  auto left = ParseUnary(true);
  while (IsOp("**")) {
    auto e = MakeExpr(Expr::Kind::kBinary, Next().line);
    e->name = "**";
    e->kids.push_back(std::move(left));
    e->kids.push_back(ParseUnary(true));
    left = std::move(e);
  }
  return left;
}

std::unique_ptr<Expr> Parser::ParseUnary(bool with_filter) {
  DepthGuard guard(this, Cur().line);
  std::unique_ptr<Expr> node;
  if (IsOp("-") || IsOp("+")) {
    node = MakeExpr(IsOp("-") ? Expr::Kind::kNeg : Expr::Kind::kPos, Cur().line);
    Next();
    node->kids.push_back(ParseUnary(false));
  } else {
    node = ParsePrimary();
  }
  node = ParsePostfix(std::move(node));
  return with_filter ? ParseFilterExpr(std::move(node)) : std::move(node);
}

std::unique_ptr<Expr> Parser::ParsePrimary() {
  const Token& t = Cur();
  const int line = t.line;
  if (t.kind == K::kName) {
    Next();
    auto e = MakeExpr(Expr::Kind::kLiteral, line);
    if (t.text == "true" || t.text == "True") {
      e->value = Value::Bool(true);
    } else if (t.text == "false" || t.text == "False") {
      e->value = Value::Bool(false);
    } else if (t.text == "none" || t.text == "None") {
      e->value = Value::None();
    } else {
      e->kind = Expr::Kind::kName;
      e->name = t.text;
    }
    return e;
  }
  if (t.kind == K::kString) {
    std::string s;
    while (Cur().kind == K::kString) s += Next().text;  // "a" "b" is "ab"
    auto e = MakeExpr(Expr::Kind::kLiteral, line);
    e->value = Value::Str(std::move(s));
    return e;
  }
  if (t.kind == K::kInt || t.kind == K::kFloat) {
    Next();
    auto e = MakeExpr(Expr::Kind::kLiteral, line);
    e->value = t.kind == K::kInt ? Value::Int(t.i) : Value::Float(t.f);
    return e;
  }
  if (SkipOp("(")) {
    if (SkipOp(")")) return MakeExpr(Expr::Kind::kTuple, line);
    auto inner = ParseExpression();
    if (IsOp(",")) {
      auto tuple = MakeExpr(Expr::Kind::kTuple, line);
      tuple->kids.push_back(std::move(inner));
      while (SkipOp(",") && !IsOp(")")) tuple->kids.push_back(ParseExpression());
      inner = std::move(tuple);
    }
    ExpectOp(")");
    return inner;
  }
  if (SkipOp("[")) {
    auto list = MakeExpr(Expr::Kind::kList, line);
    while (!SkipOp("]")) {
      if (!list->kids.empty()) ExpectOp(",");
      if (SkipOp("]")) break;
      list->kids.push_back(ParseExpression());
    }
    return list;
  }
  if (SkipOp("{")) {
    auto dict = MakeExpr(Expr::Kind::kDict, line);
    while (!SkipOp("}")) {
      if (!dict->kids.empty()) ExpectOp(",");
      if (SkipOp("}")) break;
      dict->kids.push_back(ParseExpression());
      ExpectOp(":");
      dict->kids.push_back(ParseExpression());
    }
    return dict;
  }
  Fail(line, fmt::format("unexpected {} in an expression", Describe(t)));
}

std::unique_ptr<Expr> Parser::ParsePostfix(std::unique_ptr<Expr> node) {
  for (;;) {
    const int line = Cur().line;
    if (SkipOp(".")) {
      auto e = MakeExpr(Expr::Kind::kAttr, line);
      if (Cur().kind == K::kInt) {  // x.0 is x[0]
        e->kind = Expr::Kind::kItem;
        e->kids.push_back(std::move(node));
        auto idx = MakeExpr(Expr::Kind::kLiteral, line);
        idx->value = Value::Int(Next().i);
        e->kids.push_back(std::move(idx));
      } else {
        e->name = ExpectName();
        e->kids.push_back(std::move(node));
      }
      node = std::move(e);
    } else if (SkipOp("[")) {
      node = ParseSubscript(std::move(node));
    } else if (SkipOp("(")) {
      auto call = MakeExpr(Expr::Kind::kCall, line);
      call->kids.push_back(std::move(node));
      ParseCallArgs(call.get());
      node = std::move(call);
    } else {
      return node;
    }
  }
}

std::unique_ptr<Expr> Parser::ParseSubscript(std::unique_ptr<Expr> node) {
  const int line = Cur().line;
  std::unique_ptr<Expr> parts[3];
  int n = 0;
  bool slice = false;
  for (;;) {
    if (IsOp(":")) {
      Next();
      slice = true;
      if (++n > 2) Fail(line, "a slice has at most three parts");
      continue;
    }
    if (IsOp("]")) break;
    if (parts[n]) Fail(line, fmt::format("expected ':' or ']', got {}", Describe(Cur())));
    parts[n] = ParseExpression();
  }
  ExpectOp("]");
  if (!slice) {
    if (!parts[0]) Fail(line, "an empty subscript []");
    auto e = MakeExpr(Expr::Kind::kItem, line);
    e->kids.push_back(std::move(node));
    e->kids.push_back(std::move(parts[0]));
    return e;
  }
  auto e = MakeExpr(Expr::Kind::kSlice, line);
  e->kids.push_back(std::move(node));
  for (auto& p : parts) e->kids.push_back(std::move(p));
  return e;
}

void Parser::ParseCallArgs(Expr* call) {
  bool first = true;
  while (!SkipOp(")")) {
    if (!first) ExpectOp(",");
    first = false;
    if (SkipOp(")")) break;
    if (IsOp("*") || IsOp("**")) Fail(Cur().line, "*args and **kwargs in calls are not supported");
    if (Cur().kind == K::kName && t_[i_ + 1].kind == K::kOp && t_[i_ + 1].text == "=") {
      call->kw.push_back(Next().text);
      Next();
      call->kids.push_back(ParseExpression());
    } else {
      if (!call->kw.empty()) Fail(Cur().line, "a positional argument follows a keyword argument");
      call->kids.push_back(ParseExpression());
    }
  }
}

std::string Parser::DottedName() {
  std::string name = ExpectName();
  while (IsOp(".") && t_[i_ + 1].kind == K::kName) {
    Next();
    name += "." + Next().text;
  }
  return name;
}

std::unique_ptr<Expr> Parser::ParseFilterExpr(std::unique_ptr<Expr> node) {
  for (;;) {
    if (IsOp("|")) {
      node = ParseFilter(std::move(node));
    } else if (IsName("is")) {
      node = ParseTest(std::move(node));
    } else if (IsOp("(")) {
      const int line = Next().line;
      auto call = MakeExpr(Expr::Kind::kCall, line);
      call->kids.push_back(std::move(node));
      ParseCallArgs(call.get());
      node = std::move(call);
    } else {
      return node;
    }
  }
}

std::unique_ptr<Expr> Parser::ParseFilter(std::unique_ptr<Expr> node) {
  // In an expression, at '|' (consumed here); in a {% filter %} block, at the name.
  bool first = node == nullptr;
  for (;;) {
    if (!first && !SkipOp("|")) return node;
    first = false;
    const int line = Cur().line;
    auto e = MakeExpr(Expr::Kind::kFilter, line);
    e->name = DottedName();
    if (!KnownFilter(e->name)) Fail(line, fmt::format("the filter '{}' is not supported", e->name));
    e->kids.push_back(std::move(node));
    if (SkipOp("(")) ParseCallArgs(e.get());
    node = std::move(e);
    if (!IsOp("|")) return node;
  }
}

std::unique_ptr<Expr> Parser::ParseTest(std::unique_ptr<Expr> node) {
  const int line = Next().line;  // 'is'
  auto e = MakeExpr(Expr::Kind::kTest, line);
  e->negate = SkipName("not");
  e->name = DottedName();
  if (!KnownTest(e->name)) Fail(line, fmt::format("the test '{}' is not supported", e->name));
  e->kids.push_back(std::move(node));
  if (SkipOp("(")) {
    ParseCallArgs(e.get());
  } else if ((Cur().kind == K::kName || Cur().kind == K::kString || Cur().kind == K::kInt ||
              Cur().kind == K::kFloat || IsOp("[") || IsOp("{")) &&
             !IsName("else") && !IsName("or") && !IsName("and")) {
    // `x is divisibleby 3`, `x is sameas none`: one argument without parentheses.
    if (IsName("is")) Fail(Cur().line, "a test cannot be the argument of a test");
    e->kids.push_back(ParsePostfix(ParsePrimary()));
  }
  return e;
}

}  // namespace

Program Parse(std::string_view source) { return Parser(Lex(source)).Run(); }

}  // namespace cputrain::chat::jinja
