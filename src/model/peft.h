// model/: LoRA adapters in PEFT's format (docs/formats.md, "PEFT adapters"): the directory
// PeftModel.save_pretrained writes and PeftModel.from_pretrained reads.
//
//   adapter_config.json        peft_type "LORA", r, lora_alpha, lora_dropout, target_modules,
//                              modules_to_save, init_lora_weights, use_rslora, task_type, ...
//   adapter_model.safetensors  per layer and adapted module (its path in the task model, as
//                              Lora::sites() names it) under the prefix "base_model.model.":
//                                <module>.lora_A.weight  [r, in]
//                                <module>.lora_B.weight  [out, r]
//                              and each module to save as its Hugging Face tensors
//                              ("base_model.model.qa_outputs.weight" [2, C], ".bias" [2]).
//
// Reading is strict, as model/hf.h's: a config this engine cannot apply exactly (DoRA, per-module
// ranks or alphas, some layers only, a bias, a regular expression for target_modules, another
// PEFT method) is refused by key, and the weights must hold every tensor the config implies, each
// of its exact shape, finite, and nothing else. Every failure is an InputError naming the file
// (and the key or tensor) with a fix. Writing gives what peft 0.21 writes: every config key it
// writes, with its defaults, and F32 tensors (metadata {"format": "pt"}), each file atomic.
#pragma once

#include <memory>
#include <string>

#include "model/checkpoint_path.h"
#include "model/lora.h"
#include "model/params.h"
#include "runtime/worker_pool.h"

namespace cputrain::model {

// The files (kAdapterConfigFile, kAdapterFile) are named in model/checkpoint_path.h: a LoRA run's
// step directories are adapter directories.
// The prefix of every tensor name: PeftModel's base_model (the LoraModel) and its model.
inline constexpr const char* kPeftKeyPrefix = "base_model.model.";
// The format's version written as peft_version (what the files follow, not a PEFT install).
inline constexpr const char* kPeftFormatVersion = "0.21.2";

// adapter_config.json, as far as this engine reads it.
struct AdapterInfo {
  LoraConfig cfg;                       // r, alpha, dropout, targets, modules to save, init, rslora
  std::string base_model_name_or_path;  // "" when null
  std::string task_type;                // "CAUSAL_LM", "QUESTION_ANS", "SEQ_CLS"; "" when null
  bool fan_in_fan_out = false;          // true for GPT-2's Conv1D (PEFT sets it; the files'
                                        // shapes do not depend on it)
};

// Reads <dir>/adapter_config.json. InputError naming the file and the key, with a fix: a missing
// file, bad JSON, peft_type other than LORA, use_dora, rank_pattern / alpha_pattern,
// layers_to_transform / layers_pattern, a bias other than "none", target_modules as a regular
// expression, init_lora_weights that needs PEFT's own code (pissa, olora, loftq, ...), a value
// of the wrong type or out of range.
AdapterInfo ReadAdapterConfig(const std::string& dir);

// Reads <dir>/adapter_model.safetensors into params (lora.layout().total() floats; padding rows
// of a saved vocabulary tensor are zero). F32, BF16 and F16 are read; every tensor lora implies
// must be there with its exact shape and finite values, and no other (each failure an InputError
// naming the file and the tensor). An adapter_model.bin is refused with the line that converts it.
void LoadAdapter(const std::string& dir, const Lora& lora, float* params);

// Writes <dir>/adapter_model.safetensors and then <dir>/adapter_config.json (creating dir), each
// atomically: what PeftModel.save_pretrained writes for this adapter.
void WriteAdapter(const std::string& dir, const Lora& lora, const float* params,
                  const std::string& base_model_name_or_path);

// The adapter of <dir> resolved against the base model: ReadAdapterConfig, its task_type checked
// against the base's head, and Lora's resolution (an InputError naming the file if a target is
// not in this model).
std::unique_ptr<Lora> OpenAdapter(const std::string& dir, const ParamLayout& base);

// base_params (base.total() floats) += the adapter of <dir>, as PEFT's merge_and_unload: each
// adapted weight W += scale * B A, each module to save replaced by the adapter's copy.
void MergeAdapter(WorkerPool& pool, const std::string& dir, const ParamLayout& base,
                  float* base_params);

}  // namespace cputrain::model
