// GPT-2 in Hugging Face's layout (docs/formats.md, "Hugging Face GPT-2 directories"): a
// directory with config.json (GPT2Config) and model.safetensors (GPT2LMHeadModel's state_dict;
// the `transformer.` prefix may be absent, as in GPT2Model saves and the hub's gpt2).
//
// Name mapping, HF -> ours (l = block):
//   wte.weight (V,C) -> wte (Vp,C), rows V..Vp-1 zero   wpe.weight (maxT,C) -> wpe
//   h.l.ln_1.{weight,bias} -> ln1w/ln1b                 h.l.ln_2.{weight,bias} -> ln2w/ln2b
//   h.l.attn.c_attn.weight (C,3C) -> qkvw (3C,C)         h.l.attn.c_attn.bias -> qkvb
//   h.l.attn.c_proj.weight (C,C) -> attprojw (C,C)       h.l.attn.c_proj.bias -> attprojb
//   h.l.mlp.c_fc.weight (C,4C) -> fcw (4C,C)             h.l.mlp.c_fc.bias -> fcb
//   h.l.mlp.c_proj.weight (4C,C) -> fcprojw (C,4C)       h.l.mlp.c_proj.bias -> fcprojb
//   ln_f.{weight,bias} -> lnfw/lnfb
// The four weights of HF's Conv1D layers are stored (in, out) and are transposed to our
// (OC, C). lm_head.weight, if present, must equal wte (GPT-2 ties them; a file where it differs
// is refused, not silently untied). The causal-mask buffers h.l.attn.bias / attn.masked_bias
// are ignored; any other tensor is refused by name. BF16 and F16 tensors are converted to fp32.
#pragma once

#include <string>

#include "model/gpt2.h"

namespace cputrain::model {

inline constexpr const char* kHfConfigFile = "config.json";
inline constexpr const char* kHfWeightsFile = "model.safetensors";

// True if `path` is a directory holding config.json and model.safetensors.
bool IsHfDir(const std::string& path);

// The model's shape from <dir>/config.json. Throws InputError naming the key of a config this
// engine cannot run (another model_type or activation, layer_norm_epsilon != 1e-5, ...).
Shape ReadHfShape(const std::string& dir);

// Loads <dir>/model.safetensors into params (layout.total() floats); the config's shape must be
// layout.shape(). Every tensor's presence, dtype and shape is checked (InputError).
void LoadHf(const std::string& dir, const ParamLayout& layout, float* params);

// Writes dir/model.safetensors (F32, metadata {"format": "pt"}, names as GPT2LMHeadModel's
// save_pretrained writes them: `transformer.` prefix, no lm_head.weight since it is tied) and
// then dir/config.json, each atomically; creates dir if needed.
void ExportHf(const std::string& dir, const ParamLayout& layout, const float* params);

// config.json's text for `shape` (keys sorted, two-space indent, as transformers writes it).
std::string HfConfigJson(const Shape& shape);

}  // namespace cputrain::model
