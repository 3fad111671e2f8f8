// Tokenizers: text <-> token ids.
//
//   gpt2   GPT-2's byte-level BPE (V = 50257, end-of-text 50256), identical to the reference
//          encoder (OpenAI's tiktoken, tests/tokenizer_test.cc) on valid UTF-8; see
//          gpt2_tokenizer.h.
//   bytes  one token per byte, id = byte value (V = 256), no end-of-text token.
//   a Hugging Face tokenizer.json (a file, or a directory holding it and optionally
//          tokenizer_config.json): byte-level BPE (GPT-2, Llama 3, SmolLM2, Qwen2) or
//          SentencePiece-style BPE (Llama 2, TinyLlama, Mistral), ids as the `tokenizers`
//          library gives them; see hf_tokenizer.h.
//   BERT's WordPiece (a vocab.txt, a WordPiece tokenizer.json, or a directory holding either):
//          ids and offsets as the `tokenizers` library's BertWordPieceTokenizer gives them;
//          see wordpiece.h.
//
// gpt2 and bytes are lossless: Decode(Encode(x)) == x for every byte string x, valid UTF-8 or
// not; a tokenizer.json one for the text its pipeline keeps (hf_tokenizer.h).
//
// Thread safety: a Tokenizer is immutable once made; Encode and Decode may be called from any
// number of threads at once (the gpt2 word cache is per thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace cputrain::data {

// GPT-2's vocabulary size: a model of this V or more speaks GPT-2 ids, not bytes.
inline constexpr int kGpt2VocabSize = 50257;

// The special tokens Hugging Face's add_special_tokens=True puts around one text (the
// post-processor's template, e.g. Llama's <s> before it): ids before and after the text's.
struct SpecialFrame {
  std::vector<int> before, after;
};

// [begin, end) byte offsets into the text passed to EncodeWithOffsets, one per id (Hugging Face's
// offsets, in UTF-8 bytes of the original text instead of characters).
struct Offset {
  uint32_t begin = 0, end = 0;
  bool operator==(const Offset&) const = default;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string name() const = 0;  // "gpt2", "bytes", or the tokenizer.json's path
  virtual int vocab_size() const = 0;    // V: 50257, 256, or 1 + the largest id
  // The end-of-text id that marks documents: 50256 for gpt2, -1 for bytes, eos_token() for a
  // tokenizer.json.
  virtual int eot_token() const = 0;
  // Beginning and end of sequence ids (tokenizer_config.json's bos_token and eos_token, else the
  // post-processor's); -1 if none. gpt2 and bytes have none (gpt2's marker is eot_token()).
  virtual int bos_token() const { return -1; }
  virtual int eos_token() const { return -1; }
  // What EncodeWithSpecial adds; empty for gpt2 and bytes (as GPT-2's HF tokenizer).
  virtual const SpecialFrame& special_frame() const;
  // Appends the ids of `text` to *out. Special tokens written in the text (e.g. "<s>" for a
  // tokenizer.json that declares it) become their ids, as in Hugging Face; gpt2 encodes
  // "<|endoftext|>" as text (tiktoken's encode_ordinary).
  virtual void Encode(std::string_view text, std::vector<int>* out) const = 0;
  // Encode with the special tokens of special_frame() around the text: Hugging Face's
  // encode(text, add_special_tokens=True).
  void EncodeWithSpecial(std::string_view text, std::vector<int>* out) const;
  // Encode, and each id's span in `text`: appends to *ids and as many to *offsets. The default
  // throws InputError naming the tokenizer ("... has no offsets"); WordPiece has them.
  virtual void EncodeWithOffsets(std::string_view text, std::vector<int>* ids,
                                 std::vector<Offset>* offsets) const;
  // The id of a token written as in the vocabulary ("[CLS]", "##ing"), or -1. The default knows
  // no tokens.
  virtual int TokenId(std::string_view token) const;
  // True if Encode(text[0, pos)) followed by Encode(text[pos, ..)) equals Encode(text): where
  // prepare-data may cut a document into chunks tokenized in parallel. Called with
  // 0 < pos < text.size().
  virtual bool IsSafeCut(std::string_view text, std::size_t pos) const = 0;
  // True if the tokenizer reads UTF-8 text (prepare-data refuses other input for it); false for
  // bytes.
  virtual bool reads_utf8() const { return true; }
  // The bytes of ids[0, n); may start or end inside a UTF-8 sequence. Throws InputError for an
  // id outside [0, vocab_size()).
  virtual std::string Decode(const int* ids, std::size_t n) const = 0;
  // The bytes of ids[0, n) that continue earlier ids, e.g. one generated token after the prompt:
  // Decode(a) + DecodeContinuation(b) == Decode(a + b) for a non-empty a (for a tokenizer.json,
  // with decoders as real models have them: Strip after Fuse, at the start only). The same as
  // Decode for gpt2 and bytes; a tokenizer.json's decoder may act on the text's start (Llama 2's
  // Strip drops its first space: Decode of "▁world" alone is "world", its continuation " world").
  virtual std::string DecodeContinuation(const int* ids, std::size_t n) const {
    return Decode(ids, n);
  }
};

// "gpt2", "bytes", a tokenizer.json file, a directory holding tokenizer.json (+ optional
// tokenizer_config.json; hf_tokenizer.h, or wordpiece.h when its model is WordPiece), a BERT
// vocab.txt or a directory holding one and no tokenizer.json (wordpiece.h), or a directory holding
// GPT-2's vocabulary under Hugging Face's names (vocab.json + merges.txt) or OpenAI's (encoder.json
// + vocab.bpe); a directory with both a tokenizer.json and GPT-2's files is read through its
// tokenizer.json. Throws InputError for an unknown name or missing/malformed vocab files. gpt2
// reads encoder.json and vocab.bpe from the first of: $CPUTRAIN_GPT2_VOCAB_DIR (if set, the only
// place looked at), <executable dir>/../share/cputrain-numa/gpt2 (where cmake
// --install and the .deb put them), <source dir>/third_party/gpt2 (compiled in, for the build
// tree; scripts/install-deps.sh --gpt2-vocab makes it).
std::unique_ptr<Tokenizer> MakeTokenizer(const std::string& name);

}  // namespace cputrain::data
