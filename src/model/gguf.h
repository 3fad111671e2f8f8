// model/gguf.h: a model as llama.cpp's GGUF file (docs/gguf.md), for llama.cpp, Ollama and
// llama-cpp-python: the tensors under llama.cpp's names, the metadata its loader reads
// (general.*, the architecture's hyperparameters, the tokenizer as tokenizer.ggml.*), as
// llama.cpp's own convert_hf_to_gguf.py writes them from a Hugging Face directory
// (tests/reference/gguf_parity.py checks both, and llama.cpp's logits).
//
// What a family is called and how its tensors are named and laid out is the family's table
// (family.h, Family::gguf: the architecture string, a row per tensor with its q/k RoPE
// permutation, the family's own keys); this writer knows no family.
//
// Tensor types, as convert_hf_to_gguf.py picks them: norms, biases, other 1-D tensors and
// learned positions are F32 whatever the type asked for; the other weights take it (F32, F16,
// BF16, or Q8_0 — F16 where a row's length is not a multiple of Q8_0's 32-value block).
// Rounding: F16 and BF16 to nearest even; Q8_0 as ggml's quantize_row_q8_0_ref (scale max|x|/127
// in fp32, stored fp16; q = round half away from zero of x / scale).
#pragma once

#include <cstdint>
#include <string>

#include "model/params.h"

namespace cputrain::data {
struct VocabList;
}

namespace cputrain::model {

enum class GgufOutType { kF32, kF16, kBf16, kQ8_0 };
// "f32", "f16", "bf16", "q8_0" (convert_hf_to_gguf.py's --outtype names); and back (InputError).
const char* GgufOutTypeName(GgufOutType t);
GgufOutType GgufOutTypeFromName(const std::string& name);

struct GgufSummary {
  std::uint64_t tensors = 0, bytes = 0;  // tensor count, file size
  std::uint64_t f32 = 0, quantized = 0;  // tensors kept F32; tensors of the asked type
  std::uint64_t f16_fallback = 0;        // Q8_0 asked, F16 written (rows not a multiple of 32)
};

// Throws InputError if a model of shape s has no GGUF export: a family with no GGUF names (BERT,
// DistilBERT), a task head, or what llama.cpp's architecture fixes otherwise. Needs no
// tokenizer: callers check it before looking for one, so that a BERT checkpoint is refused for
// what it is, not for its tokenizer (issue 43).
void CheckGgufModel(const Shape& s);
// CheckGgufModel, then `vocab`: a vocabulary of another size, or a tokenizer llama.cpp cannot
// reproduce (its message names the key and why). Cheap: callers check before reading weights.
void CheckGguf(const Shape& s, const data::VocabList& vocab);

// Writes the model (layout, params) with its tokenizer `vocab` (data/vocab_list.h: padded to
// the model's V) as GGUF v3 at `path`, atomically. `name` is general.name. Throws CheckGguf's
// InputError before writing anything.
GgufSummary ExportGguf(const std::string& path, const ParamLayout& layout, const float* params,
                       const data::VocabList& vocab, GgufOutType type, const std::string& name);

}  // namespace cputrain::model
