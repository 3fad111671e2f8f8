// Hugging Face tokenizer.json tokenizers (the public interface is Tokenizer in tokenizer.h):
// the BPE pipelines real models ship, giving the ids the `tokenizers` library gives
// (tests/tokenizer_hf_test.cc compares them on a multilingual corpus).
//
//   added tokens  every added token (special or not) written in the text is matched first,
//                 leftmost-longest, and becomes its id (lstrip/rstrip take the whitespace
//                 next to it); the text between is encoded by the pipeline below. All are
//                 matched on the raw text (HF matches a non-special token with normalized: true
//                 on the normalized text: the same wherever the normalizer leaves it alone).
//   normalizer    null, NFC (nfc.h), Prepend, Replace (a String pattern), Sequence of these.
//   pre-tokenizer null, ByteLevel (add_prefix_space; use_regex: GPT-2's pattern), Split with
//                 Llama 3's or Qwen2's pattern (hf_pretokenizer.h; behavior Isolated), Digits
//                 (individual_digits), Metaspace (replacement, prepend_scheme or
//                 add_prefix_space, split), Sequence of these.
//   model         BPE over ByteLevel-mapped bytes (when a ByteLevel pre-tokenizer is present:
//                 GPT-2, Llama 3, SmolLM2, Qwen2) or over characters with byte_fallback
//                 (<0xNN> tokens) and unk_token/fuse_unk (Llama 2, TinyLlama, Mistral);
//                 ignore_merges; merges as "a b" strings or [a, b] pairs. Merges apply by rank,
//                 leftmost first (HF's heap order). Ids may go up to millions.
//   post-processor TemplateProcessing (its single template), RobertaProcessing,
//                 BertProcessing, ByteLevel (no effect on ids), Sequence: special_frame(), used
//                 only by EncodeWithSpecial.
//   decoder       ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence; null joins
//                 tokens with spaces (as HF). Decode gives raw bytes: byte-fallback tokens that
//                 do not form valid UTF-8 stay bytes (HF writes U+FFFD for them), so Decode
//                 inverts Encode. DecodeContinuation leaves out what acts on the text's
//                 start and ends (Strip; Metaspace's first ▁), for ids that follow others.
//
// tokenizer_config.json next to tokenizer.json (optional): bos_token and eos_token (a string
// or {"content": ...}) name bos_token() and eos_token(); add_bos_token / add_eos_token, where
// given, decide whether EncodeWithSpecial adds them (as transformers' LlamaTokenizerFast
// rebuilds its post-processor from them), else the post-processor's template decides. Without a
// config, bos and eos are the template's special tokens before and after the text.
//
// WordPiece (BERT's) tokenizer.json files are WordPieceTokenizer's (wordpiece.h; MakeTokenizer
// routes them there). Anything else (Unigram and WordLevel models, other
// normalizers such as NFKC/Lowercase, other pre-tokenizers or patterns, BPE dropout,
// subword prefixes/suffixes, single_word added tokens) is an InputError naming the file, the key
// and what is supported.
//
// Thread safety: immutable after Load; Encode and Decode may be called from any thread.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"
#include "data/vocab_list.h"

namespace cputrain::data {

class HfTokenizer final : public Tokenizer {
 public:
  // `path`: a tokenizer.json, or a directory holding one (and optionally
  // tokenizer_config.json). Throws InputError naming the file and key of what is malformed or
  // unsupported.
  static std::unique_ptr<HfTokenizer> Load(const std::string& path);
  ~HfTokenizer() override;

  std::string name() const override;
  int vocab_size() const override;
  int eot_token() const override { return eos_token(); }
  int bos_token() const override;
  int eos_token() const override;
  const SpecialFrame& special_frame() const override;
  void Encode(std::string_view text, std::vector<int>* out) const override;
  std::string Decode(const int* ids, std::size_t n) const override;
  std::string DecodeContinuation(const int* ids, std::size_t n) const override;
  bool IsSafeCut(std::string_view text, std::size_t pos) const override;
  // The vocabulary as lists (data/vocab_list.h): tokens, kinds from tokenizer.json alone (the
  // added tokens'), merges, bos/eos and whether they are added, the pipeline's shape. ListVocab
  // adds what tokenizer_config.json says.
  VocabList List() const;

  struct Impl;

 private:
  explicit HfTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cputrain::data
