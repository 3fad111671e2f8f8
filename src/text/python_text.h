// Python's str semantics that run_qa.py, the official SQuAD evaluation scripts and chat templates
// (src/chat) rely on, for UTF-8 text: what str.lstrip(), str.split(), str.lower() and re's \b do to
// a string decides features and scores, so each is CPython's to the code point (tables generated
// from CPython by gen_python_text_table.py; tests/squad_test.cc checks normalize_answer, EM and F1
// against the interpreter running the official scripts).
//
// Input is valid UTF-8 (every string here comes from nlohmann::json, which refuses anything
// else); a stray byte decodes as U+FFFD and never reads out of bounds.
//
// Thread safety: every function may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/utf8.h"

namespace cputrain::task {

using ::cputrain::AppendUtf8;

// The code point at s[*i], advancing *i past it.
char32_t NextCodePoint(std::string_view s, std::size_t* i);
// len() of the Python str: code points.
std::size_t CountCodePoints(std::string_view s);
// The byte offset of code point `chars` (s.size() for chars == CountCodePoints(s)); for chars
// beyond the end, s.size() + the excess, so comparisons between positions keep their order.
std::size_t CharsToBytes(std::string_view s, std::size_t chars);

bool PyIsSpace(char32_t c);  // str.isspace()
bool PyIsWord(char32_t c);   // re's \w on a str pattern: str.isalnum() or '_'

std::string_view PyLstrip(std::string_view s);              // str.lstrip()
std::vector<std::string_view> PySplit(std::string_view s);  // str.split()
std::string PyLower(std::string_view s);                    // str.lower(), final sigma included
// str.capitalize(): the first code point title-cased (to as many as three), the rest lower().
std::string PyCapitalize(std::string_view s);
bool PyIsPrintable(char32_t c);  // str.isprintable() of one code point (repr() escapes the rest)

// The official evaluation scripts' normalize_answer: lower(), drop string.punctuation (ASCII),
// replace \b(a|an|the)\b by a space, then ' '.join(split()).
std::string NormalizeAnswer(std::string_view s);

// The Unicode version of the tables (CPython's unicodedata.unidata_version when generated).
const char* PythonUnicodeVersion();

}  // namespace cputrain::task
