// Texts and text pairs to token ids, as a fast tokenizer makes them for run_glue.py and
// run_classification.py: tokenizer(a, b, max_length=max_seq_length, truncation=True), no padding
// (DataCollatorWithPadding pads each batch):
//   - BERT's WordPiece: [CLS] a [SEP] (b [SEP]); token types 0 up to and including the first
//     [SEP], 1 for b and its [SEP];
//   - a tokenizer.json: its template around each text (a Llama's <s> before it, an </s> after it
//     where add_eos_token is set): frame(a) (frame(b)), types unused;
//   - truncation="longest_first": the specials are kept; of the two texts' tokens the longer
//     gives up tokens first — the `tokenizers` library's rule: with n1 <= n2 the budget left
//     after the specials, the shorter keeps min(n1, budget / 2 rounded down) when both must be
//     cut, the longer the rest; one text is cut at the budget.
//
// Thread safety: Encode may be called from any number of threads at once (data::Tokenizer's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"

namespace cputrain::task {

class PairEncoder {
 public:
  // Throws InputError when max_length leaves no room for a text beside the specials.
  PairEncoder(const data::Tokenizer& tokenizer, int max_length);
  // The ids of a, or of the pair (a, *b), into *ids (replacing them); returns where b's part
  // starts (token type 1 from there), or the length for one text. Throws InputError when
  // max_length leaves no room for a pair's texts beside a pair's specials.
  int Encode(std::string_view a, const std::string_view* b, std::vector<std::int32_t>* ids) const;
  // The padding id: [PAD] for WordPiece, else -1 (the model's pad_token_id decides).
  int pad() const { return pad_; }

 private:
  std::size_t Specials(bool pair) const;
  void CheckRoom(bool pair) const;
  const data::Tokenizer& tok_;
  int max_length_;
  bool wordpiece_;
  int pad_ = -1;
  data::SpecialFrame frame_;
};

}  // namespace cputrain::task
