// data/vocab_list.h: a tokenizer's vocabulary as lists — every token by id with its kind, the
// BPE merges in rank order, the special tokens, what the pipeline around the model does, and the
// chat template — for writing the tokenizer into another format (model/gguf.h: llama.cpp's
// tokenizer.ggml.* keys). The tokenizer itself is loaded as MakeTokenizer loads it (tokenizer.h),
// so a vocabulary is listed only if cputrain-numa can also encode with it.
//
// Token kinds follow what the tokenizer's own files say, as llama.cpp's convert_hf_to_gguf.py
// reads them (docs/gguf.md, "Tokenizer"):
//   byte-level BPE       an added token (tokenizer.json's added_tokens) is kControl when it is
//                        special or looks special ("<|...|>", "<pad>", "<mask>"), else
//                        kUserDefined; vocabulary tokens are kNormal
//   SentencePiece BPE    <0xNN> byte-fallback tokens are kByte; the tokens tokenizer_config.json
//                        names (bos, eos, unk, pad, sep, cls, mask, additional_special_tokens) and
//                        special added tokens kControl; other added tokens kUserDefined
//   ids no token has     kUnused, spelled "[PAD<id>]" (up to the model's vocabulary size)
//
// Thread safety: plain data.
#pragma once

#include <string>
#include <vector>

namespace cputrain::data {

struct VocabList {
  // How text becomes model symbols: byte-level BPE (GPT-2, Llama 3, SmolLM2, Qwen2: every byte is
  // a symbol, spelled with ByteLevelCodePoints), or SentencePiece-style BPE over characters with
  // <0xNN> byte fallback and spaces written U+2581 (Llama 2, TinyLlama, Mistral).
  enum class Model { kByteLevelBpe, kSentencePieceBpe };
  // Byte-level BPE: how the pre-tokenizer splits text before BPE. kGpt2: ByteLevel's own GPT-2
  // regex; kLlama3 / kQwen2: Split with Llama 3's / Qwen2's regex, then ByteLevel without one;
  // kDigitsGpt2: Digits(individual_digits) then ByteLevel's GPT-2 regex (SmolLM2); kOther: any
  // other arrangement (split_text says which).
  enum class Split { kNone, kGpt2, kLlama3, kQwen2, kDigitsGpt2, kOther };
  enum class Kind { kNormal, kControl, kUserDefined, kByte, kUnused };
  struct Merge {
    int left, right, merged;  // token ids: left + right spell merged
  };

  std::string source;  // the tokenizer.json's path, for messages
  Model model = Model::kByteLevelBpe;
  Split split = Split::kNone;
  std::string split_text;      // the pre-tokenizer as tokenizer.json writes it (kOther's message)
  bool ignore_merges = false;  // BPE's ignore_merges: a whole piece in the vocabulary is one token
  // Vocabulary tokens (not added ones, which are matched before the model) that BPE's merges do
  // not make from their own text (ids): only they make ignore_merges matter, since it acts on a
  // piece that is a whole vocabulary token. Empty for most vocabularies.
  std::vector<int> unmerged;
  // A space is put before the text: SentencePiece-style Prepend("▁") or Metaspace with a prepend
  // scheme, or byte-level ByteLevel(add_prefix_space).
  bool prefix_space = false;
  bool nfc = false;                 // the normalizer puts text in Unicode NFC first (Qwen2)
  std::vector<std::string> tokens;  // by id, spelled as in tokenizer.json
  std::vector<Kind> kinds;          // by id
  std::vector<Merge> merges;        // in rank order (rank = index)
  int bos = -1, eos = -1, unk = -1, pad = -1;
  bool add_bos = false, add_eos = false;  // encode(text, add_special_tokens=True) adds them
  std::string chat_template;              // "" if the tokenizer has none
};

// The vocabulary of `tokenizer`: a tokenizer.json file or a directory holding one (with its
// tokenizer_config.json and chat_template.jinja, if any), as MakeTokenizer reads it. `vocab_size`
// pads the list with kUnused tokens up to it (a model's vocabulary may be larger than its
// tokenizer's); 0: the tokenizer's own size. Throws InputError naming the file and what is wrong:
// a tokenizer MakeTokenizer refuses, one that is not a Hugging Face BPE tokenizer.json (WordPiece,
// "gpt2", "bytes"), ids at or beyond vocab_size, a chat template that is not a string.
VocabList ListVocab(const std::string& tokenizer, int vocab_size = 0);

}  // namespace cputrain::data
