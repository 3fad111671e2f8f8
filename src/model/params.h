// model/: the parameter tensors of a model and the flat buffer they live in.
//
// A family (family.h) lists its tensors as TensorInfo rows; ParamLayout derives everything else
// from that list: offsets, sizes, weight-decay segments, the checkpoint order, and the points
// where backward reports a range of gradients final.
//
// Layout. Parameters (and gradients, and AdamW moments) live in one flat float buffer each. The
// order inside it is layer-major,
//     [input tensors | block 0 | block 1 | ... | block L-1 | output tensors],
// (input: the tensors listed before the first per-layer one, e.g. GPT-2's wte and wpe; output:
// those listed after, e.g. the final norm and an untied LM head), so that the gradients of a
// block are one contiguous range, finished together during backward: the range [from, end)
// grows from the end of the buffer toward its start (the output tensors, then block L-1 ... block
// 0, then the input tensors), and gradient buckets are synced while backward goes on
// (ReadyPoints). Checkpoints are tensor-major (each tensor's L copies together, tensors in table
// order: llm.c's order for GPT-2); checkpoint.h converts.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/function_ref.h"
#include "model/shape.h"
#include "runtime/worker_pool.h"

namespace cputrain::model {

// What a tensor does in the layers, whatever its family calls it. The names are llm.c's GPT-2
// tensors, which every decoder family maps onto (family.h's tables give each family's names):
//   kWte      token embedding (Vp, C)            kWpe      learned positions (maxT, C)
//   kLn1w/b   the norm before attention          kQkvw/b   fused q|k|v projection (Q, C)
//   kAttprojw/b  attention output (C, A)         kLn2w/b   the norm before the MLP
//   (A = NH * head size: C, unless the family has a head_dim of its own)
//   kFcw/b    MLP input: (F, C), or (2F, C) as gate|up for a gated MLP (SwiGLU)
//   kFcprojw/b   MLP output (C, F)               kLnfw/b   the final norm
//   kLmHead   an untied LM head (Vp, C); absent when the head is kWte
// and the encoder families' (BERT, DistilBERT; post-norm blocks: kLn1 follows attention's
// residual add, kLn2 the MLP's):
//   kWtt      token-type embedding (types, C)    kLnEw/b   the norm of the embeddings' sum
//   kPoolw/b  BERT's pooler over [CLS] (C, C)    kHeadw/b  the task head: (2, C) start|end for
//                                                          question answering, (labels, C)
// and, in a LoRA layout only (model/lora.h), the adapters of each kind of adapted module
// (kLoraSiteKinds of them): A (r, in) at kLoraFirst + 2k, B (out rows, r) at kLoraFirst + 2k + 1.
inline constexpr int kLoraSiteKinds = 9;
enum Tensor : int {
  kWte,
  kWpe,
  kLn1w,
  kLn1b,
  kQkvw,
  kQkvb,
  kAttprojw,
  kAttprojb,
  kLn2w,
  kLn2b,
  kFcw,
  kFcb,
  kFcprojw,
  kFcprojb,
  kLnfw,
  kLnfb,
  kLmHead,
  kWtt,
  kLnEw,
  kLnEb,
  kPoolw,
  kPoolb,
  kHeadw,
  kHeadb,
  kQNormw,
  kKNormw,
  kLnPostAttnw,
  kLnPostMlpw,
  kLoraFirst,
  kNumTensors = kLoraFirst + 2 * kLoraSiteKinds
};

// Random init: normal(0, 0.02) (GPT-2's and transformers' initializer_range), the residual
// projections of GPT-2 0.02/sqrt(2L), zeros, ones; LoRA's (model/lora.h): uniform(-1/sqrt(in),
// 1/sqrt(in)) for an (out, in) tensor (torch's kaiming_uniform_ with a = sqrt(5), PEFT's A) and
// normal(0, 1/out) (PEFT's "gaussian" A, out = r).
enum class Init { kNormal, kResidualNormal, kZeros, kOnes, kKaimingUniform, kNormalInvRows };

struct TensorInfo {
  Tensor t;
  const char* name;  // ours, e.g. "qkvw"
  bool per_layer;    // L copies, one inside each block
  bool decay;        // AdamW weight decay applies: the 2-D tensors
  Init init;
  std::vector<std::size_t> shape;  // of one copy, (out, in) for weights, e.g. {3C, C} for qkvw
  std::size_t numel = 0;           // of one copy
  // Rows [real_rows, shape[0]) are padding (the vocabulary's [V, Vp)): 0 at init, never read
  // from or written to files. 0: every row is real.
  std::size_t real_rows = 0;
};

// Builds a table row; the size in size_t, checked for overflow (a damaged header's C = 600000000
// must not overflow 4*C*C).
TensorInfo MakeTensor(Tensor t, const char* name, bool per_layer, bool decay, Init init,
                      std::vector<std::size_t> shape, std::size_t real_rows = 0);

// Where each tensor copy lives in the flat buffer.
class ParamLayout {
 public:
  // Throws InputError if shape.Problem() is not "" (callers reading a file check it first, to
  // name the file).
  explicit ParamLayout(const Shape& shape);
  // The layout of another table over the same shape (a LoRA layout: model/lora.h).
  ParamLayout(const Shape& shape, std::vector<TensorInfo> table);
  const Shape& shape() const { return shape_; }
  // The family's table, in its order.
  const std::vector<TensorInfo>& tensors() const { return table_; }
  bool has(Tensor t) const { return index_[t] >= 0; }
  const TensorInfo& info(Tensor t) const;  // has(t) must hold
  std::size_t total() const { return total_; }
  // Offset of tensor t's copy for `layer` (ignored for tensors that are not per layer).
  std::size_t offset(Tensor t, int layer = 0) const;
  std::size_t block_begin(int layer) const { return block_begin_ + layer * block_size_; }
  std::size_t block_size() const { return block_size_; }
  // Start of the output tensors (the end of block L-1).
  std::size_t output_begin() const { return block_begin(shape_.L); }
  // Offset in the tensor-major checkpoint order.
  std::size_t checkpoint_offset(Tensor t, int layer = 0) const;
  // The LM head's weight: kLmHead if the family has an untied head, else kWte.
  Tensor head() const { return has(kLmHead) ? kLmHead : kWte; }

  // The points where Backward reports [p, total()) final, in the order it reports them:
  // output_begin(), block_begin(L-1), ..., block_begin(0), 0. Gradient buckets are cut at them.
  std::vector<std::size_t> ReadyPoints() const;

  // Maximal runs [begin, end) of the flat buffer with one weight-decay setting, in order.
  struct Segment {
    std::size_t begin, end;
    bool decay;
  };
  const std::vector<Segment>& segments() const { return segments_; }

 private:
  Shape shape_;
  std::vector<TensorInfo> table_;
  std::array<int, kNumTensors> index_;            // row of each tensor in table_, -1 if absent
  std::array<std::size_t, kNumTensors> where_{};  // in-block offset (per layer) or absolute
  std::array<std::size_t, kNumTensors> ckpt_{};   // start in checkpoint order
  std::size_t block_begin_ = 0, block_size_ = 0, total_ = 0;
  std::vector<Segment> segments_;
};

// The index of the first non-finite float of p[0, n), or n if all are finite.
std::size_t FirstNonFinite(const float* p, std::size_t n);
// The hint of a load refused for a weight that is not finite.
inline constexpr const char* kDivergedHint =
    "the checkpoint holds a diverged model (NaN or Inf weights): use a checkpoint from before the "
    "loss diverged";

// Where flat index i (< layout.total()) lives, for messages: "tensor qkvw, layer 3, element 17"
// ("tensor wte, element 5" for a tensor that is not per layer).
std::string DescribeParam(const ParamLayout& layout, std::size_t i);

// Fills params with the family's random init from `seed`. Each value is a pure function of
// (seed, tensor row, layer, index), so the result does not depend on the pool size. Padding rows
// are 0.
void RandomInit(WorkerPool& pool, const ParamLayout& layout, uint64_t seed, float* params);
// Told by a loader each time a tensor copy is complete in `params` (every part of a fused one:
// q, k and v of qkvw), once per (tensor, layer), so that its caller can convert it and give its
// pages back before the next is written (train/replica_group.cc: a bf16 frozen base). Loaders
// write the tensors outside the blocks (embeddings, final norm, LM head) first, then the blocks'
// layer by layer.
using TensorDone = FunctionRef<void(Tensor t, int layer)>;
// RandomInit, telling `done` of each tensor copy as soon as it is written.
void RandomInit(WorkerPool& pool, const ParamLayout& layout, uint64_t seed, float* params,
                TensorDone done);
// Tensor t's copies only, with the values RandomInit gives them, on the calling thread (a task
// head a checkpoint lacks).
void RandomInitTensor(const ParamLayout& layout, Tensor t, uint64_t seed, float* params);

}  // namespace cputrain::model
