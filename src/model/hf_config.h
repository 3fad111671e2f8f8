// model/ internal: reading and writing Hugging Face config.json keys for the families'
// from_hf_config / to_hf_config, each refusal an InputError naming the file, the key and what
// this engine runs; and what several families share (the decoder keys and tensor names of the
// Llama lineage, sliding-window layers, rope_scaling).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/family.h"
#include "model/shape.h"

namespace cputrain::model::hf {

[[noreturn]] void BadConfig(const std::string& path, const std::string& what,
                            const std::string& hint);
// An integer key in [1, max] (missing: InputError, unless `fallback` is given >= 1).
int IntKey(const nlohmann::json& cfg, const std::string& key, const std::string& path, int max,
           int fallback = 0);
// A positive finite number (missing: fallback).
double FloatKey(const nlohmann::json& cfg, const std::string& key, const std::string& path,
                double fallback);
// A boolean (missing or null: fallback).
bool BoolKey(const nlohmann::json& cfg, const std::string& key, const std::string& path,
             bool fallback);
// A key this engine implements one way only: absent, null, or one of `ok`.
void FixedKey(const nlohmann::json& cfg, const std::string& key,
              const std::vector<nlohmann::json>& ok, const std::string& path,
              const std::string& family);

// A float as the shortest decimal that reads back as it (1e-05, not 9.999999747378752e-06): how
// transformers writes the numbers it was given.
double Decimal(float x);

// The keys every decoder of the Llama lineage has under the same names (hidden_size,
// num_hidden_layers, num_attention_heads, num_key_value_heads (default: heads),
// intermediate_size, vocab_size, max_position_embeddings, rms_norm_eps, rope_theta,
// tie_word_embeddings, head_dim (missing or null: default_head_dim, 0 meaning hidden / heads),
// pad_token_id (null or missing: none)), for family `arch`; the family reads its own after.
// Defaults: rms_norm_eps 1e-6, rope_theta 10000, tie_word_embeddings `tied`.
Shape DecoderKeys(const nlohmann::json& cfg, const std::string& path, Arch arch, bool tied,
                  int default_head_dim = 0);
// Those keys back, as transformers writes them (head_dim, pad_token_id when there is one).
nlohmann::json DecoderKeysJson(const Shape& s);

// rope_scaling: absent, null or of type "default": none; else one of `ok` (llama3, linear) read
// into s->rope_scaling, any other type refused by name.
void RopeScalingKey(const nlohmann::json& cfg, const std::string& path, const std::string& family,
                    const std::vector<RopeScaling::Kind>& ok, Shape* s);
nlohmann::json RopeScalingJson(const RopeScaling& r);

// Sliding-window attention from config.json: `window` (sliding_window, > 0) on the layers
// transformers' layer_types names "sliding_attention" (a list of one "sliding_attention" or
// "full_attention" per layer; where config.json has none, `sliding` says, the family's own rule).
// Sets s->window, window_from and global_every (Shape's pattern); InputError for a list of
// another length or value, or one that pattern cannot say (docs/fine-tuning.md).
void WindowLayers(const nlohmann::json& cfg, const std::string& path, int window,
                  const std::vector<bool>& sliding, Shape* s);
// transformers' layer_types for a shape ("full_attention" everywhere without a window).
nlohmann::json LayerTypesJson(const Shape& s);
// Qwen2Config's and Qwen3Config's windows: use_sliding_window (default false), sliding_window
// (4096, kept only with it), max_window_layers (28: the layers from it on are windowed), or
// layer_types, which transformers writes; and those keys back.
void QwenWindows(const nlohmann::json& cfg, const std::string& path, Shape* s);
void QwenWindowsJson(const Shape& s, nlohmann::json* cfg);

// The tensor names Llama, Mistral, Qwen2 and Qwen3 share (model.embed_tokens, model.layers.{}.
// self_attn.{q,k,v,o}_proj, mlp.{gate,up,down}_proj, input_layernorm, post_attention_layernorm,
// model.norm, lm_head; with their biases: a model lists only the tensors it has), plus Qwen3's
// q_norm / k_norm.
std::vector<HfTensor> LlamaHfTensors();

}  // namespace cputrain::model::hf
