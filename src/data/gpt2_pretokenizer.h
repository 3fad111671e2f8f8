// GPT-2's pre-tokenization: the regex that cuts text into pieces before byte-level BPE,
//
//   /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu
//
// implemented by hand, exactly as the reference (OpenAI's tiktoken) matches it:
//   - contractions are tried first, only at the start of a piece and case-sensitively
//     ("'S" is Other + Letter);
//   - " ?" takes one U+0020 SPACE only (never a tab, newline or NBSP) and only when the next
//     code point is a Letter, Number or Other, whose run it then starts;
//   - a whitespace run followed by non-whitespace gives all but its last code point
//     (`\s+(?!\S)`); that last one is a SPACE that starts the next piece, or a piece of its own
//     (`\s+`); a run that ends the text is one piece.
// Bytes that are not valid UTF-8 are Other, one byte each (the reference cannot see them: it
// takes Unicode strings), so every input splits and the pieces always concatenate to it.
//
// Thread safety: a Gpt2PreTokenizer is used by one thread; distinct ones are independent.
#pragma once

#include <cstddef>
#include <string_view>

namespace cputrain::data {

class Gpt2PreTokenizer {
 public:
  explicit Gpt2PreTokenizer(std::string_view text) : text_(text) {}

  // Sets *piece to the next piece (a view into the text) and returns true, or returns false at
  // the end. Pieces are never empty.
  bool Next(std::string_view* piece);

 private:
  std::string_view text_;
  std::size_t pos_ = 0;
};

// True if tokenizing text[0, pos) and text[pos, end) separately gives the same pieces as
// tokenizing the whole text: the code point before pos is not whitespace and the byte at pos
// is ASCII whitespace. No regex match can span such a position (Letter/Number/Other runs stop
// at whitespace, and a whitespace run is matched from its first code point onwards), so
// prepare-data cuts its parallel chunks only there. False for pos == 0 or pos >= size.
bool IsGpt2SafeCut(std::string_view text, std::size_t pos);

}  // namespace cputrain::data
