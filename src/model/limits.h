// The largest model shape cputrain-numa accepts, from a config, a checkpoint header or a Hugging
// Face config.json. Header only: the config (which does not link the model) checks the same
// bounds.
//
// Why these: V up to 2^22 holds every vocabulary in use (Llama 3: 128,256; Qwen2: 151,936;
// token files hold uint32 ids above 65,535, docs/formats.md); C and L sit far above any GPT-2/GPT-3
// shape (GPT-3 175B: C=12288, L=96), maxT is the longest context of the families' released models
// (config.json's max_position_embeddings: Llama 3.1 and 3.2, Gemma 3, Qwen2.5, Phi-3-128k: 131,072;
// what a run allocates follows its T, and generation's KV cache the positions it fills), and all
// keep every per-tensor size, and
// the attention buffer (B,NH,T,T), well inside size_t; kMaxParams bounds the whole model to
// 2^40 floats (4 TiB; 16 TiB with gradients and AdamW moments), below what a 47-bit user
// address space can hold, so no size computed from a valid shape overflows.
#pragma once

#include <cstdint>

namespace cputrain::model {

inline constexpr int kMaxVocab = 1 << 22;   // V, and Vp
inline constexpr int kMaxChannels = 65536;  // C (and NH <= C)
inline constexpr int kMaxLayers = 4096;     // L
inline constexpr int kMaxSeqLen = 1 << 17;  // maxT: 131,072, Llama 3.1/3.2's, Gemma 3's, Qwen2.5's
inline constexpr int kMaxTypes = 1024;      // token types (BERT: 2)
inline constexpr int kMaxLabels = 65536;    // classes of a classification head
inline constexpr std::uint64_t kMaxParams = std::uint64_t{1} << 40;

}  // namespace cputrain::model
