// Jinja2's lexer (jinja2/lexer.py, 3.1) with transformers' settings: trim_blocks and
// lstrip_blocks on, keep_trailing_newline off, the default delimiters {{ }}, {% %}, {# #}.
//
// What decides the text around tags, as Jinja2 does it:
//   - line breaks \r\n and \r become \n, and one trailing \n of the template is dropped;
//   - `{%-` / `{{-` / `{#-` strip all whitespace (newlines too) before the tag; `-%}` / `-}}` /
//     `-#}` strip all whitespace after it;
//   - trim_blocks: `%}` and `#}` also take one \n right after them (`+%}` keeps it);
//   - lstrip_blocks: whitespace between a line's start and a `{%` or `{#` goes (`{%+` keeps
//     it); not before `{{`. "A line's start" includes the text right after a tag whose match
//     ended in a newline, as Jinja2's line_starting.
// Inside a tag, `}}` and `%}` end it only when every ( [ { opened in it is closed.
#include <charconv>
#include <cstring>
#include <string>

#include "chat/jinja.h"
#include "fmt/format.h"

namespace cputrain::chat::jinja {
namespace {

bool IsAsciiSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' ||
         (c >= 0x1c && c <= 0x1f);
}

// Python's `\s+` fullmatch over text: ASCII whitespace and the non-ASCII spaces (U+0085,
// U+00A0, U+1680, U+2000-200A, U+2028/9, U+202F, U+205F, U+3000).
bool AllSpace(std::string_view s) {
  if (s.empty()) return false;
  for (std::size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      if (!IsAsciiSpace(s[i])) return false;
      ++i;
      continue;
    }
    static const char* kSpaces[] = {"\xc2\x85",     "\xc2\xa0",     "\xe1\x9a\x80", "\xe2\x80\xa8",
                                    "\xe2\x80\xa9", "\xe2\x80\xaf", "\xe2\x81\x9f", "\xe3\x80\x80"};
    std::size_t n = 0;
    for (const char* sp : kSpaces) {
      if (s.compare(i, std::strlen(sp), sp) == 0) n = std::strlen(sp);
    }
    if (n == 0 && s.size() - i >= 3 && s[i] == '\xe2' && s[i + 1] == '\x80' &&
        static_cast<unsigned char>(s[i + 2]) <= 0x8a) {
      n = 3;  // U+2000..U+200A
    }
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string NormalizeNewlines(std::string_view src) {
  std::string out;
  out.reserve(src.size());
  for (std::size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      out += '\n';
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      out += src[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();  // keep_trailing_newline=False
  return out;
}

bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

class Lexer {
 public:
  explicit Lexer(std::string src) : src_(std::move(src)) {}
  std::vector<Token> Run();

 private:
  // One {{ }}, {% %} or {# #} starting at pos_ (at its `{`); after it, pos_ is past its end.
  void Tag();
  // After `close` (`}` or `%` or `#`) and its `-`/`+` marker: the whitespace rules.
  void AfterEnd(char sign, bool trims);
  void Operand();
  void String();
  void Number();
  void Push(Token::Kind kind, std::string text) {
    out_.push_back({kind, std::move(text), 0, 0, line_});
  }
  void Advance(std::size_t n) {
    for (std::size_t k = 0; k < n; ++k) line_ += src_[pos_ + k] == '\n';
    pos_ += n;
  }
  [[noreturn]] void Error(const std::string& what) { Fail(line_, what); }

  std::string src_;
  std::size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> out_;
};

std::vector<Token> Lexer::Run() {
  while (pos_ < src_.size()) {
    std::size_t next = pos_;
    for (;;) {
      next = src_.find('{', next);
      if (next == std::string::npos || next + 1 >= src_.size()) {
        next = std::string::npos;
        break;
      }
      char c = src_[next + 1];
      if (c == '{' || c == '%' || c == '#') break;
      ++next;
    }
    std::string text =
        src_.substr(pos_, next == std::string::npos ? std::string::npos : next - pos_);
    if (next == std::string::npos) {
      Push(Token::Kind::kData, text);
      Advance(text.size());
      break;
    }
    char kind = src_[next + 1];
    char sign = next + 2 < src_.size() ? src_[next + 2] : 0;
    if (sign == '-') {
      std::size_t e = text.size();
      while (e > 0 && AllSpace(std::string_view(text).substr(e - 1, 1))) --e;
      text.resize(e);
    } else if (sign != '+' && kind != '{') {
      std::size_t l_pos = text.rfind('\n');
      l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
      if ((l_pos > 0 || line_starting_) && AllSpace(std::string_view(text).substr(l_pos))) {
        text.resize(l_pos);
      }
    }
    int data_line = line_;
    Advance(next - pos_);
    if (!text.empty()) out_.push_back({Token::Kind::kData, std::move(text), 0, 0, data_line});
    Tag();
  }
  Push(Token::Kind::kEnd, "");
  return std::move(out_);
}

void Lexer::Tag() {
  char kind = src_[pos_ + 1];
  Advance(2);
  if (pos_ < src_.size() && (src_[pos_] == '-' || src_[pos_] == '+')) Advance(1);
  if (kind == '#') {
    std::size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) Error("a comment {# is never closed by #}");
    char sign = end > pos_ && (src_[end - 1] == '-' || src_[end - 1] == '+') ? src_[end - 1] : 0;
    Advance(end + 2 - pos_);
    AfterEnd(sign, true);
    return;
  }
  const char close = kind == '{' ? '}' : '%';
  Push(kind == '{' ? Token::Kind::kPrintBegin : Token::Kind::kBlockBegin, "");
  std::vector<char> brackets;
  for (;;) {
    if (pos_ >= src_.size()) Error(fmt::format("a tag is never closed by {}}}", close));
    char c = src_[pos_];
    if (brackets.empty()) {
      char sign = c == '-' || c == '+' ? c : 0;
      std::size_t at = pos_ + (sign ? 1 : 0);
      if (at + 1 < src_.size() && src_[at] == close && src_[at + 1] == '}' &&
          !(sign == '+' && close == '}')) {
        Push(kind == '{' ? Token::Kind::kPrintEnd : Token::Kind::kBlockEnd, "");
        Advance(at + 2 - pos_);
        AfterEnd(sign, close == '%');
        return;
      }
    }
    if (IsAsciiSpace(c)) {
      Advance(1);
    } else if (c == '\'' || c == '"') {
      String();
    } else if (IsDigit(c)) {
      Number();
    } else if (IsNameStart(c)) {
      std::size_t e = pos_;
      while (e < src_.size() && (IsNameStart(src_[e]) || IsDigit(src_[e]))) ++e;
      Push(Token::Kind::kName, src_.substr(pos_, e - pos_));
      Advance(e - pos_);
    } else {
      Operand();
      const std::string& op = out_.back().text;
      if (op == "(" || op == "[" || op == "{") {
        brackets.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
      } else if (op == ")" || op == "]" || op == "}") {
        if (brackets.empty()) Error(fmt::format("unexpected '{}'", op));
        if (brackets.back() != op[0]) {
          Error(fmt::format("unexpected '{}', expected '{}'", op, brackets.back()));
        }
        brackets.pop_back();
      }
    }
  }
}

void Lexer::AfterEnd(char sign, bool trims) {
  // The end tag's match: `-X}\s*`, or `X}` + one \n under trim_blocks (blocks and comments), or
  // `+X}` alone. Jinja2 sets line_starting from the match's last character.
  bool ends_newline = false;
  if (sign == '-') {
    while (pos_ < src_.size() && IsAsciiSpace(src_[pos_])) {
      ends_newline = src_[pos_] == '\n';
      Advance(1);
    }
  } else if (sign != '+' && trims && pos_ < src_.size() && src_[pos_] == '\n') {
    Advance(1);
    ends_newline = true;
  }
  line_starting_ = ends_newline;
}

void Lexer::Operand() {
  static const char* kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/",
                               "*",  "%",  "~",  "[",  "]",  "(",  ")", "{", "}",
                               ">",  "<",  "=",  ".",  ":",  "|",  ",", ";"};
  for (const char* op : kOps) {
    if (src_.compare(pos_, std::strlen(op), op) == 0) {
      Push(Token::Kind::kOp, op);
      Advance(std::strlen(op));
      return;
    }
  }
  Error(fmt::format("unexpected character '{}' in a tag", src_[pos_]));
}

void Lexer::String() {
  const char quote = src_[pos_];
  const int start_line = line_;
  std::string out;
  std::size_t i = pos_ + 1;
  auto hex = [&](std::size_t n) {
    if (i + n > src_.size()) Fail(line_, "a truncated \\x, \\u or \\U escape in a string");
    uint32_t v = 0;
    for (std::size_t k = 0; k < n; ++k) {
      char h = src_[i + k];
      int d = IsDigit(h)               ? h - '0'
              : (h >= 'a' && h <= 'f') ? h - 'a' + 10
              : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                       : -1;
      if (d < 0) Fail(line_, "a malformed \\x, \\u or \\U escape in a string");
      v = v * 16 + static_cast<uint32_t>(d);
    }
    i += n;
    return v;
  };
  auto utf8 = [&](uint32_t c) {
    if (c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) {
      Fail(line_, "a string escape names a surrogate or a code point past U+10FFFF");
    }
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else if (c < 0x800) {
      out += static_cast<char>(0xC0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
      out += static_cast<char>(0xE0 | (c >> 12));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (c >> 18));
      out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    }
  };
  for (;;) {
    if (i >= src_.size()) Fail(start_line, "a string is never closed");
    char c = src_[i];
    if (c == quote) break;
    if (c != '\\') {
      out += c;
      ++i;
      continue;
    }
    if (i + 1 >= src_.size()) Fail(start_line, "a string is never closed");
    char e = src_[i + 1];
    i += 2;
    switch (e) {
      case '\n':
        break;  // line continuation
      case '\\':
        out += '\\';
        break;
      case '\'':
        out += '\'';
        break;
      case '"':
        out += '"';
        break;
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'v':
        out += '\v';
        break;
      case 'x':
        utf8(hex(2));
        break;
      case 'u':
        utf8(hex(4));
        break;
      case 'U':
        utf8(hex(8));
        break;
      case 'N':
        Fail(line_, "the \\N{name} string escape is not supported; write the character");
      default:
        if (e >= '0' && e <= '7') {
          uint32_t v = static_cast<uint32_t>(e - '0');
          for (int k = 0; k < 2 && i < src_.size() && src_[i] >= '0' && src_[i] <= '7'; ++k, ++i) {
            v = v * 8 + static_cast<uint32_t>(src_[i] - '0');
          }
          utf8(v);
        } else {
          out += '\\';
          out += e;
        }
    }
  }
  Push(Token::Kind::kString, std::move(out));
  out_.back().line = start_line;
  Advance(i + 1 - pos_);
}

void Lexer::Number() {
  // Decimal integers and floats (digits '.' digits, exponents, '_' separators); 0x/0o/0b
  // integers are refused by name (no chat template writes them).
  std::size_t e = pos_;
  auto digits = [&] {
    std::size_t s = e;
    while (e < src_.size() && (IsDigit(src_[e]) || (src_[e] == '_' && e > s &&
                                                    e + 1 < src_.size() && IsDigit(src_[e + 1]))))
      ++e;
    return e > s;
  };
  if (src_[pos_] == '0' && e + 1 < src_.size() && std::strchr("xXoObB", src_[e + 1]) != nullptr) {
    Error("hexadecimal, octal and binary integer literals are not supported");
  }
  digits();
  bool is_float = false;
  if (e + 1 < src_.size() && src_[e] == '.' && IsDigit(src_[e + 1])) {
    ++e;
    digits();
    is_float = true;
  }
  if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
    std::size_t save = e;
    ++e;
    if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
    if (digits()) {
      is_float = true;
    } else {
      e = save;
    }
  }
  std::string text;
  for (std::size_t k = pos_; k < e; ++k) {
    if (src_[k] != '_') text += src_[k];
  }
  Token t{is_float ? Token::Kind::kFloat : Token::Kind::kInt, text, 0, 0, line_};
  if (is_float) {
    t.f = std::strtod(text.c_str(), nullptr);
  } else {
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), t.i);
    if (ec != std::errc() || end != text.data() + text.size())
      Error(fmt::format("the integer {} is too large (we keep 64-bit integers)", text));
  }
  out_.push_back(t);
  Advance(e - pos_);
}

}  // namespace

std::vector<Token> Lex(std::string_view source) { return Lexer(NormalizeNewlines(source)).Run(); }

}  // namespace cputrain::chat::jinja
