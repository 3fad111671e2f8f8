// model/: LoRA — low-rank adapters over a frozen base model (Hu et al.), as PEFT defines them.
//
// A targeted linear layer y = x W^T + b of the base gains y += (alpha/r) * B(A(dropout(x))):
// A (r, in), B (out, r) train; W and b stay frozen. Targets are named as PEFT names modules
// (target_modules: "q_proj", "c_attn", "query", ...; a name matches a module whose path is the
// name or ends with "." + the name, PEFT's rule; "all-linear" = every linear layer of the blocks).
// One of our fused products holds several Hugging Face modules (Llama's q|k|v in qkvw, gate|up
// in fcw; BERT's query|key|value): each targeted module is its own site, adding into its rows
// of the product's output.
//
// What trains is a flat buffer of its own, laid out by a ParamLayout over the LoRA table
// (Lora::layout()): per layer the sites' A and B (a "block"), plus the modules_to_save (whole
// base tensors that train fully, e.g. BERT's qa_outputs: copied from the base at init, read from
// here instead of the base by the passes). So gradients, AdamW moments, ZeRO-1 shards, the
// gradient sync, checkpoints and the norm all run over the trainable buffer alone, exactly as
// they run over a whole model without LoRA; the base is read-only and shared.
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "model/family.h"
#include "model/params.h"
#include "runtime/worker_pool.h"

namespace cputrain::model {

// train.lora (config) / adapter_config.json (PEFT).
struct LoraConfig {
  int r = 0;            // rank; 0: no LoRA (full fine-tuning)
  float alpha = 8.f;    // lora_alpha (PEFT's default 8): the update is scaled by alpha / r
  float dropout = 0.f;  // lora_dropout on the adapters' input
  // PEFT module names; empty: the family's default (PEFT's own per model type: q_proj, v_proj
  // for Llama; c_attn for GPT-2; query, value for BERT; PEFT has none for DistilBERT,
  // whose default here is its query and value, q_lin, v_lin).
  std::vector<std::string> target_modules;
  // Base modules that train fully (names as target_modules: "qa_outputs", "lm_head").
  std::vector<std::string> modules_to_save;
  // PEFT's init_lora_weights: true (A Kaiming-uniform with a = sqrt(5), B zero: the model starts
  // equal to the base), "gaussian" (A normal(0, 1/r), B zero), false (B also Kaiming-uniform: a
  // test init that starts away from the base).
  enum class Init { kDefault, kGaussian, kRandom } init = Init::kDefault;
  // The frozen base's storage: fp32, or bf16 (half the memory; the products then read bf16
  // weights, so it needs train.precision: bf16).
  bool base_bf16 = false;
  // PEFT's use_rslora (rank-stabilized LoRA): the update is scaled by alpha / sqrt(r) instead.
  bool rslora = false;
  bool on() const { return r > 0; }
  float scale() const {
    return rslora ? alpha / std::sqrt(static_cast<float>(r)) : alpha / static_cast<float>(r);
  }
};

// "default" / "gaussian" / "false"; and back (InputError naming the valid names).
const char* LoraInitName(LoraConfig::Init init);
LoraConfig::Init LoraInitFromName(const std::string& name);

// One adapted module: rows [row0, row0 + rows) of the output of base tensor `base` (one of
// kQkvw, kAttprojw, kFcw, kFcprojw), input width `in`, in every layer. Its adapters are the
// LoRA layout's tensors `a` (r, in) and `b` (rows, r); `kind` (< kLoraSiteKinds) numbers the
// (base, part) pair: a = kLoraFirst + 2 kind, b = a + 1.
struct LoraSite {
  Tensor base;
  HfTensor::Rows part;
  int row0 = 0, rows = 0, in = 0;
  int kind = 0;
  Tensor a, b;
  std::string
      module;  // PEFT's module path with {} for the layer: "model.layers.{}.self_attn.q_proj"
};

// A base tensor that trains fully (modules_to_save): the same role in the LoRA layout.
struct LoraSaved {
  Tensor t;
  std::string hf_name;  // its Hugging Face name ("qa_outputs.weight"), for the PEFT files
};

class Lora {
 public:
  // Resolves cfg against the base model: InputError naming an unknown target or module to save
  // (with the model's module names), an r or alpha out of range, a target that is not a linear
  // layer of the blocks.
  Lora(const ParamLayout& base, const LoraConfig& cfg);
  Lora(const Lora&) = delete;
  Lora& operator=(const Lora&) = delete;

  const LoraConfig& config() const { return cfg_; }
  float scale() const { return cfg_.scale(); }
  const ParamLayout& base() const { return base_; }
  // The trainable buffer's layout: input saved tensors | per layer the sites' A, B | output
  // saved tensors (ReadyPoints and segments as for a model; A and B decay, as the Trainer's
  // default decays every weight matrix).
  const ParamLayout& layout() const { return layout_; }
  const std::vector<LoraSite>& sites() const { return sites_; }
  // The sites adding into base tensor t's product, in row order (empty: none).
  const std::vector<const LoraSite*>& SitesOf(Tensor t) const;
  const std::vector<LoraSaved>& saved() const { return saved_; }
  // Base tensor t trains fully (is in the LoRA layout).
  bool Saves(Tensor t) const { return layout_.has(t); }
  // The resolved PEFT names, sorted: target_modules and modules_to_save as adapter_config.json
  // holds them. Each module is named by the shortest ending of its path (without the layer
  // index) that PEFT's matching resolves to the modules chosen and no other ("q_proj";
  // "attn.c_proj" when GPT-2's mlp.c_proj is not chosen too; for modules_to_save PEFT matches
  // any ending, not only one after a dot), else by its full path in every layer (PEFT's own
  // spelling of target_modules="all-linear": "bert.encoder.layer.0.output.dense", ...).
  std::vector<std::string> TargetNames() const;
  std::vector<std::string> SavedNames() const;
  // What trains, in numbers: "LoRA r=16 alpha=32 on q_proj, v_proj: 1,126,400 trainable of
  // 1,100,048,384 (0.10%)".
  std::string Describe() const;

  // Floats of the activation memory the sites need for B rows of T positions, N = B*T (a pass
  // over fewer rows or positions lays the same views out for its own N, which fits):
  //   h   (L, sites, N, r)  each site's xd A^T per layer (sites() order), saved for backward
  //   dh  (N, r)            backward's scratch, one site at a time
  //   xd  (N, max in)       the dropped input, recomputed in backward (only if cfg.dropout > 0)
  std::size_t ActFloats(int B, int T) const;

 private:
  ParamLayout base_;
  LoraConfig cfg_;
  std::vector<LoraSite> sites_;
  std::vector<LoraSaved> saved_;
  std::array<std::vector<const LoraSite*>, kNumTensors> by_base_;  // into sites_ (never resized)
  ParamLayout layout_;
};

// The initial trainable buffer: each site's A and B by cfg.init from `seed` (a pure function of
// (seed, tensor, layer, index), whatever the pool size), each saved module copied from the base.
void LoraInit(WorkerPool& pool, const Lora& lora, uint64_t seed, const float* base, float* params);

// base (the base layout) += scale * B A for every site and layer, and each saved module copied
// over the base's: the merged model (PEFT's merge_and_unload), in fp32.
void LoraMerge(WorkerPool& pool, const Lora& lora, const float* params, float* base);

// What Forward and Backward (transformer.h) take to train adapters: the trainable buffer, and
// the activation memory (Lora::ActFloats) of the group running the pass. Dropout of the adapters'
// input (cfg.dropout) runs when the Activations' dropout is on (the trainer sets on, seed, row0
// for decoders too), one mask per (seed, layer, site kind) over the input's global element index
// (row0 * T * in + i), so any placement drops the same elements (model/net.cc).
struct LoraPass {
  const Lora* lora = nullptr;
  const float* params = nullptr;  // lora->layout().total()
  float* acts = nullptr;          // lora->ActFloats(B, T)
};

}  // namespace cputrain::model
