// BERT's WordPiece tokenizer (the public interface is Tokenizer in tokenizer.h), giving the ids
// and offsets of Hugging Face's `tokenizers` library (BertWordPieceTokenizer, transformers'
// BertTokenizerFast; tests/wordpiece_test.cc compares them on a multilingual corpus).
//
// Read from a vocab.txt (one token a line, the id is the line number from 0), a tokenizer.json
// whose model is WordPiece, or a directory holding tokenizer.json (preferred) or vocab.txt, with
// an optional tokenizer_config.json beside it.
//
// The pipeline, in the library's order:
//   added tokens   [CLS] [SEP] [PAD] [UNK] [MASK] (vocab.txt: those of the five in the
//                  vocabulary; tokenizer.json: its added_tokens) written in the text are matched
//                  first, on the raw text, leftmost-longest, and become their ids.
//   BertNormalizer clean_text (drops U+0000, U+FFFD and control, format and private-use
//                  characters but \t \n \r; whitespace becomes a space), handle_chinese_chars
//                  (spaces around CJK ideographs), strip_accents (NFD, then no nonspacing marks;
//                  by default when lowercase), lowercase (Rust's char::to_lowercase: İ -> i̇).
//   BertPreTokenizer  splits on whitespace; each punctuation character is a word of its own.
//   WordPiece      greedy longest-match-first, "##" before pieces that continue a word; a word
//                  longer than max_input_chars_per_word (100) characters, or one that does not
//                  split into vocabulary pieces, is [UNK].
// The per-code-point data (which characters are controls, punctuation, marks; lower case) is
// wordpiece_table.inc, read off the library itself by gen_wordpiece_tables.py, so it agrees
// with the library for every code point. Bytes that are not UTF-8 are each read as U+FFFD
// (dropped by clean_text).
//
// Offsets: each normalized character keeps the byte span of the original character it came from
// (an accent stripped with its letter, İ's two lower-case characters, a CJK character's spaces);
// a token spans from its first character's begin to its last's end, as the library's alignments
// give, in bytes of the original text. Removed characters (controls) belong to no token.
//
// tokenizer_config.json: do_lower_case, strip_accents and tokenize_chinese_chars, where given,
// replace the normalizer's lowercase, strip_accents and handle_chinese_chars (as
// BertTokenizerFast does); cls_token, sep_token, pad_token, unk_token and mask_token name the
// special tokens (defaults [CLS] [SEP] [PAD] [UNK] [MASK]). A vocab.txt without a config is read
// as BertTokenizerFast reads it: lower case, accents stripped, CJK split.
//
// Thread safety: immutable after Load; every method may be called from any thread.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"

namespace cputrain::data {

class WordPieceTokenizer final : public Tokenizer {
 public:
  // `path`: a vocab.txt, a tokenizer.json, or a directory holding either. Throws InputError
  // naming the file, the key (or line) and a fix for a missing or malformed vocabulary,
  // duplicate tokens, a missing unk token, or a normalizer / pre-tokenizer this class does not
  // implement.
  static std::unique_ptr<WordPieceTokenizer> Load(const std::string& path);
  ~WordPieceTokenizer() override;

  std::string name() const override;  // the file read (vocab.txt or tokenizer.json)
  int vocab_size() const override;
  // [SEP] ends a text as eos, [CLS] begins it as bos (the post-processor's tokens, as HfTokenizer
  // takes them); documents are separated by [SEP].
  int eot_token() const override { return sep_id(); }
  int bos_token() const override { return cls_id(); }
  int eos_token() const override { return sep_id(); }
  const SpecialFrame& special_frame() const override;  // [CLS] before, [SEP] after
  void Encode(std::string_view text, std::vector<int>* out) const override;
  void EncodeWithOffsets(std::string_view text, std::vector<int>* ids,
                         std::vector<Offset>* offsets) const override;
  int TokenId(std::string_view token) const override;
  // As the library's WordPiece decoder: tokens joined by spaces, "##" pieces glued to the one
  // before, special tokens kept, and (cleanup, on in BERT's files) " ." " ," " 's" ... closed
  // up within each token as the decoder does. DecodeContinuation: the same for tokens that follow
  // others (a space or glue before the first too).
  std::string Decode(const int* ids, std::size_t n) const override;
  std::string DecodeContinuation(const int* ids, std::size_t n) const override;
  // Cuts at ASCII whitespace: no word, added token or accent reordering spans it.
  bool IsSafeCut(std::string_view text, std::size_t pos) const override;

  int cls_id() const;
  int sep_id() const;
  int pad_id() const;  // -1 if the vocabulary has none
  int unk_id() const;
  int mask_id() const;  // -1 if the vocabulary has none
  bool lowercase() const;

  struct Impl;

 private:
  explicit WordPieceTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cputrain::data
