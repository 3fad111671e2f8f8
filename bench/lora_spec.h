// bench/lora_spec: `bench train --lora r=16[,alpha=32][,targets=q_proj+v_proj][,base=bf16]`, the
// LoRA fine-tune every row of the run trains instead of a full one (docs/benchmarks.md, "LoRA
// rows"), and what follows from it for a model: the train.lora.* keys of our rows, the adapters
// both sides train (resolved once, by model::Lora, so that PEFT gets the same module names),
// the bytes a step's gradient sync moves, the FLOPs of a step and the memory guard's estimates.
//
// Both sides train the adapters the same way: alpha (default 2r, PEFT's most common setting),
// dropout 0, PEFT's init, AdamW over the trainable parameters only (weight decay on every matrix:
// A and B), the frozen base in fp32, or with base=bf16 in bf16 on our bf16 rows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "model/lora.h"
#include "model/shape.h"

namespace cputrain::bench {

struct LoraSpec {
  int r = 0;                         // 0: no --lora (full fine-tunes)
  double alpha = 0;                  // lora_alpha; 2r when not given
  std::vector<std::string> targets;  // PEFT module names; empty: the family's PEFT default
  bool base_bf16 = false;            // base=bf16: our bf16 rows keep the frozen base in bf16
  bool on() const { return r > 0; }
  // "r=16,alpha=32,targets=q_proj+v_proj" as it would be given (base=bf16 when set).
  std::string Text() const;
};

// Parses --lora's text strictly: comma-separated key=value items, r (required, 1..4096) once,
// alpha (> 0, <= 1e6), targets (names of [A-Za-z0-9_.-] joined by '+', no repeats), base (fp32
// or bf16); anything else is an InputError (exit 2) quoting the text, with the syntax as hint.
LoraSpec ParseLoraSpec(const std::string& text);

// The LoRA fine-tune of `spec` on a model of `shape`: the adapters (model::Lora: InputError naming
// a target the model does not have) and the counts the rows print.
class LoraRun {
 public:
  LoraRun(const model::Shape& shape, const LoraSpec& spec);

  const model::Lora& lora() const { return *lora_; }
  // Floats that train (the adapters and the modules to save) and the base's.
  std::size_t trainable() const;
  std::size_t base_params() const;
  // Writes the fine-tune into a row's config: train.lora.r, alpha, dropout 0, the targets as
  // given (empty: the family's default, which is what model::Lora resolved), base_dtype bf16 when
  // spec.base_bf16 and the row trains in bf16 (config->train.bf16 set already), else fp32.
  void ApplyTo(Config* config) const;
  // The script's --lora-r/--lora-alpha/--lora-targets/--lora-save arguments: the modules as
  // model::Lora resolved them, so that PEFT adapts exactly what we adapt.
  std::vector<std::string> PytorchArgs() const;
  // FLOPs per token of a LoRA step, model::TrainFlopsPerToken's way: the frozen base's matrix
  // products cost 4 per weight (forward, and backward's input gradient: no weight gradient), an
  // adapter's weights 6 (forward x A^T, then B; backward both gradients), a saved head's weights 6;
  // attention's 12 L T C as before. Used for both sides' GFLOP/s and MFU.
  double FlopsPerToken(int T) const;

 private:
  LoraSpec spec_;
  std::unique_ptr<model::Lora> lora_;
};

// The bytes one step's gradient sync moves between G replica groups for n trainable floats
// (fp32 gradients and weights, whatever train.precision), over all groups: the reduce-scatter,
// in which each group reads its 1/G shard from the G-1 others ((G-1) x 4n bytes in all), and,
// when every group keeps its own replica (groups on several NUMA nodes: train/replica_group.h's
// ShareReplica), the weight allgather, in which each group reads the G-1 shards it does not own
// (another (G-1) x 4n). 0 for one group. The norm's one-float allreduce is left out.
uint64_t GroupSyncBytes(std::size_t n, int G, bool shared_replica);

// The same for P processes of gloo DDP allreducing n fp32 gradient floats, at the bandwidth-
// optimal allreduce's traffic (a ring's: each process sends 2 (P-1)/P x 4n bytes): 2 (P-1) x 4n in
// all. 0 for one process.
uint64_t DdpSyncBytes(std::size_t n, int P);

}  // namespace cputrain::bench
