// The regular expressions of Hugging Face tokenizer.json pre-tokenizers that real models ship,
// implemented by hand over the code point classes of unicode_classes.h (as gpt2_pretokenizer.h
// does for GPT-2's), matched as the `tokenizers` library (Oniguruma) matches them:
//
//   Llama 3 (Split, behavior Isolated):
//     (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//      ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   Qwen2: the same with \p{N} in place of \p{N}{1,3}.
//
// Alternatives are tried in order at each position (leftmost-first, greedy), so:
//   - contractions are case-insensitive ('S, 'LL; U+017F LONG S folds to s);
//   - a letter run takes one code point before it that is not CR, LF, a letter or a number
//     (a space, a tab, NBSP, punctuation): " word", "\tword", "(word";
//   - numbers come in runs of at most 3 (Llama 3) or 1 (Qwen2), from the left;
//   - punctuation runs take one leading U+0020 and the CR/LF run after them;
//   - a whitespace run holding CR or LF ends just after its last CR/LF; another run followed by
//     non-whitespace leaves its last code point to the next piece, unless it is one code point.
// Bytes that are not valid UTF-8 are Other, one byte each, as in Gpt2PreTokenizer.
//
// Thread safety: a RegexSplitter is used by one thread; distinct ones are independent.
#pragma once

#include <cstddef>
#include <string_view>

namespace cputrain::data {

enum class SplitPattern { kLlama3, kQwen2 };

// The pattern strings exactly as tokenizer.json files hold them (after JSON unescaping).
extern const std::string_view kLlama3SplitPattern;
extern const std::string_view kQwen2SplitPattern;

class RegexSplitter {
 public:
  RegexSplitter(std::string_view text, SplitPattern pattern) : text_(text), pattern_(pattern) {}
  // As Gpt2PreTokenizer::Next: the next non-empty piece, or false at the end.
  bool Next(std::string_view* piece);

 private:
  std::string_view text_;
  SplitPattern pattern_;
  std::size_t pos_ = 0;
};

// True if text[pos - 1] ends a letter or number code point and text[pos] is ASCII whitespace:
// no piece of the GPT-2, Llama 3 or Qwen2 patterns, nor of the Digits pre-tokenizer, spans such
// a place (letter and number runs stop at whitespace, and no alternative holds a letter or
// number followed by whitespace), so text[0, pos) and text[pos, ..) pre-tokenize as the whole.
// False for pos == 0 or pos >= size.
bool IsWordSpaceCut(std::string_view text, std::size_t pos);

}  // namespace cputrain::data
