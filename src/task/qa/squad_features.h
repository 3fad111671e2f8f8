// SQuAD examples -> BERT inputs, as run_qa.py's prepare_train_features and
// prepare_validation_features make them with a fast tokenizer and pad_to_max_length=True (the
// default), question first (docs/question-answering.md, "Features"):
//
//   [CLS] question [SEP] context window [SEP] [PAD] ... [PAD]        (T = max_seq_length)
//   token_type_ids  0 ... 0 for [CLS] question [SEP], 1 for the window and its [SEP], 0 for pads
//
// The question is left-stripped (Python's str.lstrip()) and never cut; the context is cut into
// windows as the `tokenizers` library's truncation="only_second" with return_overflowing_tokens
// does: each window holds L = T - 3 - (question tokens) context tokens, window k starts at
// k * (L - doc_stride), and the last one is the first to reach the context's end. Where the
// library would fail (L < 1: the question leaves no room; doc_stride >= L: it panics), this
// throws InputError naming the example and the fix.
//
// Labels (run_qa.py's, edge cases included): the first answer's first and last token when the
// answer lies wholly inside the window, else the [CLS] index 0; 0 for an unanswerable question.
// Offsets (validation features, for post-processing) are byte offsets into the example's
// context for the window's tokens and kNoOffset for every other position.
//
// Memory: one flat (N, T) int32 array of ids and 5 int32 per feature, plus (N, T) offsets when
// kept: 1,556 bytes a feature at T = 384 (the SQuAD v1.1 training set, 88.6k features:
// 138 MB; offsets add 3 KB a feature, for the validation set only).
//
// Thread safety: MakeQaFeatures tokenizes on TBB's threads (the tokenizer must allow that, as
// data::Tokenizer does); the result is immutable and identical for any number of threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "task/qa/squad.h"

namespace cputrain::task {

struct FeatureOptions {
  int max_seq_length = 384;  // T
  int doc_stride = 128;      // context tokens shared by consecutive windows
  bool keep_offsets = true;  // validation features: what Postprocess needs
};

// The ids of [CLS], [SEP] and [PAD].
struct SpecialIds {
  int cls = -1, sep = -1, pad = -1;
};
// Looked up by name ("[CLS]", "[SEP]", "[PAD]"); InputError if the vocabulary lacks one.
SpecialIds BertSpecialIds(const data::Tokenizer& tokenizer);

// A position outside the context window (question, special tokens, padding): run_qa.py's None.
inline constexpr data::Offset kNoOffset{UINT32_MAX, UINT32_MAX};

class QaFeatures {
 public:
  struct Row {
    std::int32_t length;          // tokens before the padding: attention_mask is 1 on [0, length)
    std::int32_t context_begin;   // the window's first token (2 + question tokens)
    std::int32_t start_position;  // label: the answer's first token, or 0 ([CLS])
    std::int32_t end_position;    // label: the answer's last token, or 0 ([CLS])
    std::int32_t example_index;   // into the examples the features were made from
  };

  int max_seq_length() const { return T_; }
  std::size_t size() const { return rows_.size(); }
  const Row& row(std::size_t i) const { return rows_[i]; }
  // (T,) token ids of feature i.
  std::span<const std::int32_t> input_ids(std::size_t i) const {
    return {ids_.data() + i * static_cast<std::size_t>(T_), static_cast<std::size_t>(T_)};
  }
  // Writes T values: token_type_ids (0 / 1 as above) and attention_mask (1 on [0, length)).
  void TokenTypeIds(std::size_t i, std::int32_t* out) const;
  void AttentionMask(std::size_t i, std::int32_t* out) const;
  bool has_offsets() const { return !offsets_.empty(); }
  // (T,) byte offsets into the context of feature i's example; kNoOffset outside the window.
  std::span<const data::Offset> offsets(std::size_t i) const {
    return {offsets_.data() + i * static_cast<std::size_t>(T_), static_cast<std::size_t>(T_)};
  }
  // The features of each example are consecutive: [first_feature(e), first_feature(e + 1)).
  std::size_t first_feature(std::size_t example) const { return first_[example]; }
  std::size_t num_examples() const { return first_.size() - 1; }

 private:
  friend QaFeatures MakeQaFeatures(const std::vector<Example>&, const data::Tokenizer&,
                                   const SpecialIds&, const FeatureOptions&);
  int T_ = 0;
  std::vector<std::int32_t> ids_;      // (N, T)
  std::vector<Row> rows_;              // (N)
  std::vector<data::Offset> offsets_;  // (N, T) or empty
  std::vector<std::size_t> first_;     // (examples + 1)
};

// Throws InputError for options outside max_seq_length in [4, 2^20], doc_stride in [0, 2^20],
// and for an example whose question leaves no room (see above).
QaFeatures MakeQaFeatures(const std::vector<Example>& examples, const data::Tokenizer& tokenizer,
                          const SpecialIds& special, const FeatureOptions& options);

}  // namespace cputrain::task
