// The run configuration: one YAML file (strict: an unknown key or a wrong type is an error that
// names the file, the line and the valid keys), overridden by repeatable `--set section.key=value`
// flags. Every key, its type and its default are listed in one table (config.cc) that the
// parser, `cputrain-numa config --keys` and the docs test all read; docs/config.md documents
// them. Cross-field rules that need no machine (heads divide channels, min_lr <= lr, ...) are
// checked here; rules that need the plan or a file (batch divisible by groups, token ids below
// the vocabulary) are checked where those are known.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "mpi/mpi_config.h"
#include "optim/optim_config.h"
#include "topology/placement.h"

namespace cputrain {

struct ModelConfig {
  std::string init_from;      // checkpoint or HF directory; "" = random init from seed
  std::string preset;         // a named shape (model/presets.h) for a random init; "" = none
  std::string arch = "gpt2";  // the family of a random init (model/family.h)
  std::string head = "lm";    // lm | qa | classify (model/shape.h, Head)
  // A classifier's outputs (0: the checkpoint's) and loss (problem_type; "": the checkpoint's).
  int num_labels = 0;
  std::string problem_type;
  // A decoder classifier's padding token where its config.json names none; -1 = none.
  int pad_token_id = -1;
  int token_types = 2;                               // a random bert init's
  double hidden_dropout = 0, attention_dropout = 0;  // a random encoder init's
  int layers = 12;                                   // L
  int channels = 768;                                // C
  int heads = 12;                                    // NH
  int kv_heads = 0;                                  // NKV (grouped-query attention); 0 = heads
  int ffn_hidden = 0;      // the MLP's hidden width; 0 = the family's (4 * channels)
  int head_dim = 0;        // the heads' size; 0 = channels / heads
  int vocab_size = 50257;  // V (padded to Vp, a multiple of 128, in the parameter buffer)
  int max_seq_len = 1024;  // maxT
  double norm_eps = 1e-5;
  double rope_theta = 10000;
  // Rotary frequency scaling (Hugging Face's rope_scaling): "none", "llama3" or "linear", with
  // its factors.
  std::string rope_scaling = "none";
  double rope_factor = 8, rope_low_freq_factor = 1, rope_high_freq_factor = 4;
  int rope_original_max_position = 8192;
  bool tied_embeddings = true;  // the LM head is the token embedding (GPT-2: always)
  uint64_t seed = 1337;
};

struct DataConfig {
  // llm.c token files: paths or globs (train/batches.h expands them); empty = not set.
  std::vector<std::string> train;
  std::vector<std::string> val;  // empty = no validation
  int batch_size = 4;   // B: global sequences per micro-batch (split across groups and ranks)
  int seq_len = 64;     // T
  bool shuffle = true;  // a new permutation of the train windows every epoch
  std::optional<uint64_t> seed;  // of the shuffle; unset = model.seed
  uint64_t Seed(uint64_t model_seed) const { return seed ? *seed : model_seed; }
};

// train.lora: low-rank adapters over a frozen base (model/lora.h, docs/lora.md); r = 0: off.
struct LoraTrainConfig {
  int r = 0;
  double alpha = 8, dropout = 0;
  std::vector<std::string> target_modules;   // PEFT names; empty = the family's default
  std::vector<std::string> modules_to_save;  // base modules that train fully
  std::string init = "default";     // default | gaussian | false (PEFT's init_lora_weights)
  std::string base_dtype = "fp32";  // fp32 | bf16: the frozen base's storage
  // A PEFT adapter directory to start from (its adapter_config.json sets r, alpha, dropout,
  // targets and modules to save, its weights the start); "" = a fresh adapter from init.
  std::string adapter;
  bool on() const { return r > 0 || !adapter.empty(); }
};

struct TrainConfig {
  int steps = 200;  // optimizer updates
  // k micro-batches of data.batch_size x data.seq_len per update (gradient accumulation).
  // train.batch_tokens = k*B*T sets it instead; after LoadConfig it holds the resolved k.
  int grad_accum_steps = 1;
  long long batch_tokens = 0;  // global tokens per update; 0 = B*T*grad_accum_steps
  int eval_every = 50;         // 0 = only at the end (if data.val is set)
  int eval_batches = 8;
  int checkpoint_every = 0;  // 0 = only at the end
  std::string out_dir = "out";
  std::string resume = "auto";  // auto | never | a checkpoint path (train/resume.h)
  // A damaged or incomplete newest checkpoint: refused (false), or skipped, with a warning
  // naming it and why, for the newest good one (true).
  bool resume_fallback = false;
  int keep_checkpoints = 3;     // newest step directories kept; 0 = all
  bool skip_nonfinite = false;  // on_nonfinite: skip_step (true) or stop (false)
  bool bf16 = false;            // precision: bf16 (true) or fp32 (false)
  // Recompute each block in the backward from its kept input (model/transformer.h, Activations).
  bool gradient_checkpointing = false;
  // Which kernel runs bf16's products: auto | amx | vdpbf16ps | tile-model | onednn
  // (kernels/bf16.h: Bf16Kernel; auto = AMX, else VDPBF16PS)
  std::string bf16_kernel = "auto";
  // Which library runs the fp32 products: auto | openblas | onednn (kernels/kernels.h: Fp32Kernel)
  std::string fp32_kernel = "auto";
  // Hugging Face's report_to: none, tensorboard or all (train/reports.h); empty = none.
  std::vector<std::string> report_to;
  LoraTrainConfig lora;
};

struct CommConfig {
  double bucket_mb = 25.0;  // gradient bucket size (as PyTorch DDP's bucket_cap_mb)
};

struct Config {
  std::string topology = "this";
  topo::PlacementConfig placement;
  ModelConfig model;
  DataConfig data;
  OptimConfig optim;
  TrainConfig train;
  CommConfig comm;
  MpiConfig mpi;
  // Where it came from, for messages and metrics: "configs/quickstart.yaml + 2 --set".
  std::string source;
  // The keys the user set ("model.layers"), each with where ("--set model.layers=3",
  // "run.yaml:4"): from --set and a config file, not the built-in default config. A key the
  // user set that a checkpoint contradicts is an error (train/trainer.cc); a default is not.
  std::map<std::string, std::string> explicit_keys;
};

// Loads `path` (or the built-in default, configs/quickstart.yaml compiled into the binary, if
// path is empty) and applies `sets` ("section.key=value", value in YAML syntax, so lists work:
// placement.cpus=[[0,1],[2,3]]). Throws InputError with file:line (or the --set flag) and the
// valid keys.
Config LoadConfig(const std::string& path, const std::vector<std::string>& sets);
// Same, from YAML text; `name` is used in messages in place of a file name.
Config ParseConfig(const std::string& yaml_text, const std::string& name,
                   const std::vector<std::string>& sets);

// The effective configuration as YAML (every key, defaults included): written next to the run's
// outputs, and hashed by the MPI bridge to check that all ranks agree.
std::string ConfigToYaml(const Config& config);

// One row per key: section ("" for top-level), key, type, default, description.
struct ConfigKeyInfo {
  std::string section, key, type, default_value, description;
};
std::vector<ConfigKeyInfo> ConfigKeys();

// The YAML text of the built-in default config (configs/quickstart.yaml at build time).
const char* BuiltinConfigYaml();

const char* ScheduleName(Schedule s);
const char* MpiModeName(MpiMode m);

}  // namespace cputrain
