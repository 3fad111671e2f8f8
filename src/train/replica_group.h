// train/replica_group: the replica groups of one process — each a pinned WorkerPool and its
// memory (parameters, gradients, the optimizer's state of its ZeRO-1 shard, activations, token
// rows), all on the group's NUMA node and first touched by the group's own workers.
//
// Replica choice: groups on different NUMA nodes keep a parameter replica each (local reads in
// the GEMMs; the shards are allgathered after each update). Groups that all share one NUMA node
// gain nothing from a copy each — the copies sit in the same memory, and keeping them equal
// costs an allgather of the whole model per step plus twice the weight traffic — so they train
// on group 0's replica: each group's optimizer updates its shard in place. Gradients stay one
// buffer per group (backward writes them concurrently).
//
// LoRA (model/lora.h): the base model is frozen, so it is read-only and needs no copy per group:
// one copy per NUMA node (its fp32 weights and, in bf16, its bf16 copy), first touched by that
// node's first group and read by every group on the node. Everything above — the replicas, the
// gradients, the moments, the shards, the sync — then covers the trainable buffer alone
// (layout() is the LoRA layout; model_layout() the base's).
//
// Thread safety: built and destroyed on the main thread. OnAll runs a function on every group's
// driver at once; while it runs, a group's fields belong to its own driver (and its workers),
// except what the collectives between groups share explicitly. The main thread reads a group's
// results (loss_sum, grad_norm, timings) after OnAll returns.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "alloc/numa_alloc.h"
#include "comm/comm.h"
#include "common/function_ref.h"
#include "model/lora.h"
#include "model/transformer.h"
#include "optim/optimizer.h"
#include "runtime/worker_pool.h"
#include "topology/binding.h"
#include "topology/placement.h"

namespace cputrain::train {

// Where one group's step went (ms): forward; backward compute; communication (gradient buckets
// reduced or waited for, the norm's allreduce, the parameter allgather); optimizer update.
struct StepTimings {
  double forward_ms = 0, backward_ms = 0, comm_ms = 0, optimizer_ms = 0;
};

struct ReplicaGroup {
  int index = 0;
  int node = 0;  // OS NUMA node of all its memory
  int rows = 0;  // sequences of each step's window this group trains on
  std::unique_ptr<WorkerPool> pool;
  std::unique_ptr<WorkerPool> comm_pool;  // with placement comm CPUs and a sync to run
  int replica = 0;                  // the group whose parameter buffer this group reads and updates
  float* weights = nullptr;         // = groups[replica].params.data()
  alloc::NodeBuffer<float> params;  // layout.total(), if replica == index
  alloc::NodeBuffer<float> grads;   // layout.total()
  // The optimizer's state of its shard (optim/optimizer.h): the slots' layout and buffers (and
  // their pointers, as Update takes them), and the scratch of its cross-shard statistics.
  std::vector<optim::Slot> slots;
  std::vector<alloc::NodeBuffer<float>> state;
  std::vector<float*> state_ptrs;
  alloc::NodeBuffer<float> optim_scratch;
  alloc::NodeBuffer<float> acts;            // act->floats()
  alloc::NodeBuffer<int> tokens;            // 2 * rows * T: inputs, targets
  alloc::NodeBuffer<float> scalars;         // 16 floats for small allreduces
  std::unique_ptr<model::Activations> act;  // views into acts and tokens
  // train.precision: bf16 only (empty otherwise): the bf16 copy of the replica's parameters (if
  // replica == index; refreshed from them after every update, train/step.h), and the scratch
  // for the products' converted operands. bf16ops points into them (and at the replica's copy).
  alloc::NodeBuffer<uint16_t> params_bf16;  // layout.total()
  alloc::NodeBuffer<uint16_t> scratch_bf16;
  uint16_t* weights_bf16 = nullptr;  // = groups[replica].params_bf16.data()
  model::Bf16Operands bf16ops;
  // The operands Forward and Backward take: null in fp32.
  const model::Bf16Operands* bf16() const { return bf16ops.weights ? &bf16ops : nullptr; }
  comm::Range owned;  // its ZeRO-1 shard of the flat buffer
  // LoRA: the frozen base on this group's node (its NodeBase's), the adapters' activation memory
  // and the pass Forward/Backward take (null without LoRA).
  const float* base = nullptr;
  alloc::NodeBuffer<float> lora_acts;
  model::LoraPass lora_pass;
  const model::LoraPass* lora() const { return lora_pass.lora ? &lora_pass : nullptr; }
  // What the passes read: the base (LoRA) or the replica's weights.
  const float* model_weights() const { return base ? base : weights; }
  // The positions of the rows loaded for the next pass: RowSource::Positions (dynamic padding),
  // or 0 for the run's T.
  int positions = 0;
  // Results of the group's last step or evaluation, read by the main thread after OnAll.
  double loss_sum = 0;
  double grad_norm = 0;
  StepTimings timings;

  // What OnAll runs on the group's driver: (*fn)(*group), and on failure (*abort)(why) so the
  // other groups stop waiting for this one.
  struct Job {
    FunctionRef<void(ReplicaGroup&)>* fn = nullptr;
    FunctionRef<void(const std::string&)>* abort = nullptr;
    ReplicaGroup* group = nullptr;
    void operator()() const;
  } job;
};

// True when the plan's groups (two or more) all sit on one known NUMA node: they share group 0's
// parameter replica.
bool ShareReplica(const topo::Plan& plan);

// train.lora.base_dtype: bf16. Whether a frozen base keeps tensor t in bf16 alone: the block
// products and an untied LM head (read through the bf16 path of Net::Linear / LinearBack; a frozen
// weight has no gradient), unless the adapters train it fully (a module to save). The norms,
// biases and embeddings stay fp32 too.
bool BaseBf16Only(const model::Lora& lora, model::Tensor t);
// The floats of a base that stay fp32 (every tensor but the bf16-only ones); and what loading
// holds in fp32 on top at its peak: one bf16-only tensor while it is converted, the largest block
// one (or one outside the blocks, loaded before any block, where that weighs more than all the
// blocks' bf16 copies it comes before).
std::size_t BaseFp32Floats(const model::Lora& lora);
std::size_t BaseLoadingFp32Floats(const model::Lora& lora);

// What the groups' buffers are made for, beside their rows and positions.
struct GroupOptions {
  // Also start the plan's comm CPUs as a pool per group (only useful when gradients are synced).
  bool comm_pools = false;
  bool bf16 = false;        // also the bf16 weight copy and scratch of train.precision: bf16
  bool checkpoint = false;  // gradient checkpointing's activations (model/transformer.h)
  // Train adapters over a frozen base (one copy per node) instead of every weight; null: none.
  const model::LoraConfig* lora = nullptr;
  OptimConfig optimizer;  // the optimizer whose state each group keeps for its shard
};

class ReplicaGroups {
 public:
  // One group per plan group, each training `rows` rows of T tokens of `shape`, its buffers
  // zero-filled by its own workers (first touch on its node).
  ReplicaGroups(const topo::Topology& topology, const topo::Plan& plan, const model::Shape& shape,
                int rows, int T, const GroupOptions& options);
  ReplicaGroups(const ReplicaGroups&) = delete;
  ReplicaGroups& operator=(const ReplicaGroups&) = delete;

  int size() const { return static_cast<int>(groups_.size()); }
  ReplicaGroup& operator[](int g) { return groups_[g]; }
  const ReplicaGroup& operator[](int g) const { return groups_[g]; }
  std::vector<ReplicaGroup>& all() { return groups_; }
  bool shared_replica() const { return shared_; }
  // What trains (the replicas, gradients, moments, shards): the model's layout, or with LoRA
  // the adapters' (lora()->layout()).
  const model::ParamLayout& layout() const { return lora_ ? lora_->layout() : model_layout_; }
  // The whole model's layout: what Forward and Backward run.
  const model::ParamLayout& model_layout() const { return model_layout_; }
  const model::Lora* lora() const { return lora_.get(); }
  // The optimizer over layout() (GroupOptions::optimizer).
  const optim::Optimizer& optimizer() const { return *optimizer_; }
  // The floats of the optimizer's state all groups keep together (a checkpoint's snapshot).
  std::size_t StateFloats() const {
    std::size_t n = 0;
    for (const ReplicaGroup& grp : groups_) {
      for (const alloc::NodeBuffer<float>& b : grp.state) n += b.size();
    }
    return n;
  }

  // LoRA: one frozen base per NUMA node the groups use.
  struct NodeBase {
    int node = 0;
    int first_group = 0;  // the group that first-touches and fills it
    std::vector<int> groups;
    // model_layout().total(); with base_dtype bf16 a reservation whose block products' fp32
    // pages are given back once the bf16 copy holds them (InitBase): their bytes are not
    // resident.
    alloc::NodeBuffer<float> params;
    alloc::NodeBuffer<uint16_t> bf16;  // bf16 runs: its bf16 copy
  };
  const std::vector<NodeBase>& bases() const { return bases_; }
  // LoRA: fills node 0's base with init(pool, base, done) on its first group's workers, then
  // every other node's copies it with its own first group's workers (their first touch), and the
  // bf16 copies are converted. init tells done of each tensor copy as soon as it is written
  // (model/params.h, TensorDone: LoadCheckpoint and RandomInit do): with base_dtype bf16, a
  // block product is converted then and its fp32 pages given back, so the base's fp32 products
  // never exist together (loading peaks at the kept tensors, the bf16 copy and one tensor).
  void InitBase(FunctionRef<void(WorkerPool&, float*, model::TensorDone)> init);
  // Whether the base keeps tensor t in bf16 alone (BaseBf16Only).
  bool Bf16Only(model::Tensor t) const { return lora_ && BaseBf16Only(*lora_, t); }

  // Runs fn(g) on every group's driver at once and waits for all; if one fails, `abort` wakes
  // the others (so nobody waits forever on a dead peer) and the first error is rethrown.
  // Allocates nothing: each group's job object lives in the group.
  void OnAll(FunctionRef<void(ReplicaGroup&)> fn, FunctionRef<void(const std::string&)> abort);

  // Fills group 0's replica with init(pool, params) on group 0's workers, then every other
  // replica copies it with its own workers (its first touch). With LoRA: the trainable buffer
  // (after InitBase: init may read group 0's base).
  void InitParams(FunctionRef<void(WorkerPool&, float*)> init);

  // bf16 only: every replica's bf16 copy from its fp32 parameters, converted by the replica's
  // own group (after the parameters were set from outside the step: init, load, resume).
  void RefreshBf16Weights();

  // This process's placement: per group its CPUs, the bindings its workers read back, and the
  // NUMA nodes its memory actually sits on (placement.json's "groups").
  nlohmann::json PlacementJson(const topo::Plan& plan) const;
  // LoRA: what trains and where the frozen base's copies are — one per NUMA node: its node, the
  // groups reading it, its bytes (fp32 and bf16) and the nodes its memory actually sits on
  // (placement.json's "lora").
  nlohmann::json LoraJson() const;

 private:
  void FirstTouch();
  void ConvertTensor(WorkerPool& pool, NodeBase& nb, model::Tensor t, int l);

  model::ParamLayout model_layout_;
  std::unique_ptr<model::Lora> lora_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<topo::Binder> binder_;  // the pools bind through it
  std::vector<ReplicaGroup> groups_;
  std::vector<NodeBase> bases_;
  bool shared_ = false;
};

}  // namespace cputrain::train
