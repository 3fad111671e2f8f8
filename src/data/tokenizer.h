// Tokenizers: text <-> token ids.
//
//   gpt2   GPT-2's byte-level BPE (V = 50257, end-of-text 50256), identical to the reference
//          encoder (OpenAI's tiktoken, tests/tokenizer_test.cc) on valid UTF-8; see
//          gpt2_tokenizer.h.
//   bytes  one token per byte, id = byte value (V = 256), no end-of-text token.
//
// Both are lossless: Decode(Encode(x)) == x for every byte string x, valid UTF-8 or not.
//
// Thread safety: a Tokenizer is immutable once made; Encode and Decode may be called from any
// number of threads at once (the gpt2 word cache is per thread).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace cputrain::data {

// GPT-2's vocabulary size: a model of this V or more speaks GPT-2 ids, not bytes.
inline constexpr int kGpt2VocabSize = 50257;

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string name() const = 0;  // "gpt2" or "bytes"
  virtual int vocab_size() const = 0;    // V: 50257 or 256
  virtual int eot_token() const = 0;     // 50256 for gpt2, -1 for bytes
  // Appends the ids of `text` to *out.
  virtual void Encode(std::string_view text, std::vector<int>* out) const = 0;
  // The bytes of ids[0, n); may start or end inside a UTF-8 sequence. Throws InputError for an
  // id outside [0, vocab_size()).
  virtual std::string Decode(const int* ids, std::size_t n) const = 0;
};

// "gpt2", "bytes", or a directory holding GPT-2's vocabulary under Hugging Face's names
// (vocab.json + merges.txt, e.g. a Hugging Face model directory) or OpenAI's
// (encoder.json + vocab.bpe). Throws InputError for an unknown name or missing/malformed vocab
// files.
// gpt2 reads encoder.json and vocab.bpe from the first of: $CPUTRAIN_GPT2_VOCAB_DIR (if set,
// the only place looked at), <executable dir>/../share/cputrain-numa/gpt2 (where cmake
// --install and the .deb put them), <source dir>/third_party/gpt2 (compiled in, for the build
// tree; scripts/install-deps.sh --gpt2-vocab makes it).
std::unique_ptr<Tokenizer> MakeTokenizer(const std::string& name);

}  // namespace cputrain::data
