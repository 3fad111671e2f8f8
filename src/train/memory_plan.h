// train/memory_plan: what a training run will hold in memory, per NUMA node, worked out before
// anything is allocated — so a run that cannot fit is refused with its figures (exit 2) instead
// of being ended by the kernel's out-of-memory killer half-way through loading.
//
// The plan is the buffers train/replica_group.cc allocates, with the same sizes (a test builds
// ReplicaGroups and compares every buffer, tests/memory_plan_test.cc), per group on the group's
// node: the parameter replica (one per node's groups when they share it), gradients, the
// optimizer's state of the group's ZeRO-1 shard (and the statistics its shards add up), activations
// and token rows at the run's rows and T, and in bf16 the weights' bf16 copy and the operand
// scratch; with LoRA the frozen base once per node (fp32, plus its bf16 copy in bf16; a bf16 base
// is read into fp32 first, so its peak is both) and the adapters' activations; and the checkpoint
// snapshot of periodic saves (parameters and moments, on group 0's node). Not in it: the program
// itself (libraries, thread stacks, data files mapped read-only), and the kernels' small per-call
// scratch. `train`, the task commands' train and `cputrain-numa plan` print it
// (docs/memory-plan.md). Thread safety: plain functions of their arguments; AvailableOnNode reads
// /proc and /sys.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "model/lora.h"
#include "model/shape.h"
#include "optim/optim_config.h"
#include "topology/placement.h"

namespace cputrain::train {

// One kind of buffer on one node, summed over the node's groups.
struct MemoryLine {
  std::string what;  // "gradients"
  std::uint64_t bytes = 0;
  std::string note;  // "fp32, 2 groups"
};

struct NodeMemory {
  int node = 0;  // OS NUMA node
  std::vector<MemoryLine> lines;
  std::vector<int> groups;  // the groups whose memory is on it
  std::uint64_t total() const;
};

// What the plan needs to know of a run.
struct MemoryRun {
  model::Shape shape;
  int rows = 1;  // sequences per group in a micro-batch
  int T = 1;     // positions of the longest row
  bool bf16 = false;
  bool checkpoint = false;  // gradient checkpointing (model/transformer.h, Activations)
  std::optional<model::LoraConfig> lora;  // a LoRA fine-tune (r > 0), or a full one
  bool snapshot = false;                  // periodic checkpoints (train.checkpoint_every > 0)
  OptimConfig optimizer;                  // the optimizer (its state's size)
};

// The plan of `run` over `plan`'s groups, one entry per node that holds a group (ascending).
// Throws InputError as model::Lora does for LoRA settings the model cannot take.
std::vector<NodeMemory> PlanMemory(const topo::Plan& plan, const MemoryRun& run);

// The plan as lines: a header, per node its total beside what the node can give
// (available(node); 0: unknown) and its lines.
std::string DescribeMemory(const std::vector<NodeMemory>& nodes,
                           const std::function<std::uint64_t(int)>& available);

// The first node whose plan exceeds what available(node) says it can give (0: unknown, never
// refused), as an InputError (exit 2) that names the node, both figures, the node's three largest
// lines and `fixes` (what the command's own flags can change); nothing if every node fits.
// CPUTRAIN_MEMORY_CHECK=off in the environment turns the refusal into a warning.
void CheckMemoryFits(const std::vector<NodeMemory>& nodes,
                     const std::function<std::uint64_t(int)>& available, const std::string& fixes);

}  // namespace cputrain::train
