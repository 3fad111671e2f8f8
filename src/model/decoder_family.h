// model/ internal: what the decoder families of the Llama lineage share — their parameter table
// (one builder, each family saying which parts it has) and the config's model.* keys read as
// theirs (src/model/families/: llama.cc, qwen2.cc, qwen3.cc, mistral.cc, gemma3.cc, phi3.cc).
#pragma once

#include <string>
#include <vector>

#include "model/family.h"
#include "model/params.h"
#include "model/shape.h"

namespace cputrain::model {

// The parts of a decoder block beyond Llama's RMSNorm, fused q|k|v, attention output, gate|up
// and down products (each (out, in)), the final norm and an untied head.
struct DecoderParts {
  bool qkv_bias = false;  // biases of q, k, v (Qwen2; Llama's and Qwen3's attention_bias)
  bool out_bias = false;  // the attention output's bias (Llama's and Qwen3's attention_bias)
  bool mlp_bias = false;  // gate|up's and down's (Llama's mlp_bias)
  bool qk_norm = false;   // per-head RMSNorm weights of q and k, (head size) each (Qwen3, Gemma 3)
  bool sandwich = false;  // norms after attention and after the MLP too (Gemma 2/3)
  Init norm_init = Init::kOnes;  // Gemma's (1 + w) norms start at 0
};

// The tensors, in flat-buffer order: embed | per layer: attn_norm, qkvw, [qkvb], [q_norm,
// k_norm], attn_out, [attn_out_b], [post_attn_norm], mlp_norm, gate_up, [gate_up_b], down,
// [down_b], [post_mlp_norm] | norm, [lm_head].
std::vector<TensorInfo> DecoderTensors(const Shape& s, const DecoderParts& parts);

// The problem (Family::problem) of a family whose sliding window is on every layer or none
// (Mistral, Phi-3): "" if s is one.
std::string WindowOnEveryLayer(const Shape& s);

// model.*: the keys as given (layers, channels, heads, kv_heads, ffn_hidden, head_dim, norm_eps,
// rope_theta and rope_scaling, tied_embeddings); no biases, token types or dropout.
Shape DecoderFromConfig(const Shape& keys);

// GGUF (model/gguf.h). llama.cpp's names of the lineage's tensors (llama-arch.cpp): q, k, v and
// gate, up apart, q/k norms and biases where the model has them, output.weight for an untied
// head. rope_permute: q and k rows in the adjacent-pair rotary order of llama.cpp's "llama"
// architecture (the others rotate Hugging Face's halves, as the engine does).
std::vector<GgufTensor> LlamaGgufTensors(bool rope_permute);
// The keys convert_hf_to_gguf.py's TextModel writes for the lineage beyond model/gguf.h's own:
// <arch>.attention.head_count_kv, rope.freq_base, attention.layer_norm_rms_epsilon,
// attention.key_length / value_length (config.json has head_dim), and a linear rope_scaling's
// rope.scaling.type / factor.
void DecoderGgufKeys(const std::string& arch, const Shape& s, GgufWriter& w);
// llama.cpp's "llama" architecture (families/llama.cc; Mistral's too: convert_hf_to_gguf.py's
// LlamaModel converts MistralForCausalLM).
extern const GgufNames kLlamaGguf;

}  // namespace cputrain::model
