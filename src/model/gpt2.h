// model/: GPT-2 — its shape, the one table that describes its 16 parameter tensors, the flat
// parameter/gradient layout derived from it, the activation buffers, and forward/backward.
//
// Layout. Parameters (and gradients, and AdamW moments) live in one flat float buffer each. The
// order inside it is layer-major,
//     [wte | wpe | block 0 | block 1 | ... | block L-1 | lnfw | lnfb],
//     block l = [ln1w ln1b qkvw qkvb attprojw attprojb ln2w ln2b fcw fcb fcprojw fcprojb],
// so that the gradients of a block are one contiguous range, finished together during
// backward: the range [ReadyFrom, end) grows from the end of the buffer toward its start
// (lnf, then block L-1 ... block 0, then wte and wpe), and gradient buckets are synced while
// backward goes on. Checkpoints use llm.c's tensor-major order; checkpoint.h converts.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/function_ref.h"
#include "kernels/bf16.h"
#include "runtime/worker_pool.h"

namespace cputrain::model {

// maxT positions, V real vocabulary, Vp padded (multiple of 128), L blocks, NH heads, C channels.
struct Shape {
  int maxT = 0, V = 0, Vp = 0, L = 0, NH = 0, C = 0;
  static int PadVocab(int V) { return (V + 127) / 128 * 128; }
  bool operator==(const Shape&) const = default;
  std::string ToString() const;
  // What is wrong with this shape ("" if nothing): a dimension below 1 or above its bound in
  // model/limits.h, NH not dividing C, Vp < V, or more than kMaxParams parameters. Computed
  // without overflow for any int values, so a damaged header is judged before it sizes memory.
  std::string Problem() const;
  // Parameters of a valid shape (Problem() == ""), as ParamLayout(*this).total() but without
  // building the layout.
  std::uint64_t ParamCount() const;
};

// The 16 tensors in llm.c's checkpoint order.
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
  kNumTensors
};

enum class Init { kNormal, kResidualNormal, kZeros, kOnes };

struct TensorInfo {
  const char* name;
  bool per_layer;  // L copies, one inside each block
  bool decay;      // AdamW weight decay applies: the 2-D tensors
  Init init;       // GPT-2 init: normal(0, 0.02), residual projections 0.02/sqrt(2L)
  std::vector<std::size_t> shape;  // of one copy, e.g. {3C, C} for qkvw
  std::size_t numel = 0;           // of one copy
};

// The one table. Everything else — offsets, sizes, decay segments, init, checkpoint order —
// is derived from it. Sizes are size_t: 4*C of an unchecked shape cannot overflow an int here.
std::array<TensorInfo, kNumTensors> TensorTable(const Shape& s);

// Where each tensor copy lives in the flat buffer.
class ParamLayout {
 public:
  // Throws InputError if shape.Problem() is not "" (callers reading a file check it first, to
  // name the file).
  explicit ParamLayout(const Shape& shape);
  const Shape& shape() const { return shape_; }
  const TensorInfo& info(Tensor t) const { return table_[t]; }
  std::size_t total() const { return total_; }
  // Offset of tensor t's copy for `layer` (ignored for tensors that are not per layer).
  std::size_t offset(Tensor t, int layer = 0) const;
  std::size_t block_begin(int layer) const { return block_begin_ + layer * block_size_; }
  std::size_t block_size() const { return block_size_; }
  // Offset in llm.c's tensor-major checkpoint order.
  std::size_t checkpoint_offset(Tensor t, int layer = 0) const;

  // Maximal runs [begin, end) of the flat buffer with one weight-decay setting, in order.
  struct Segment {
    std::size_t begin, end;
    bool decay;
  };
  const std::vector<Segment>& segments() const { return segments_; }

 private:
  Shape shape_;
  std::array<TensorInfo, kNumTensors> table_;
  std::array<std::size_t, kNumTensors> in_block_{};  // offset inside a block (per-layer tensors)
  std::array<std::size_t, kNumTensors> fixed_{};     // absolute offset (the others)
  std::array<std::size_t, kNumTensors> ckpt_{};      // start in checkpoint order
  std::size_t block_begin_ = 0, block_size_ = 0, total_ = 0;
  std::vector<Segment> segments_;
};

// Fills params with GPT-2's random init from `seed`. Each value is a pure function of (seed,
// tensor, index), so the result does not depend on the pool size. Padding rows of wte are 0.
void RandomInit(WorkerPool& pool, const ParamLayout& layout, uint64_t seed, float* params);

// Activation memory for up to B rows of T positions, as offsets into one float buffer (placed
// on the group's NUMA node by the caller) plus token ids. Each view starts on a 64-byte boundary.
//
// Red zones (AddressSanitizer builds only; elsewhere the layout is exactly as without them).
// Every view is followed by its padding to 16 floats and a 16-float (64-byte, so the next view
// stays cache-line aligned) red zone, the last view included. PoisonRedZones() poisons them, so a
// kernel that runs off the end of one activation into the next is reported by ASan instead of
// silently corrupting it. Forward calls it, not Bind: callers first-touch the whole buffer (the
// trainer zero-fills it) between Bind and the first step; from the first Forward on, the buffer
// may only be accessed view by view. The parameter and gradient buffers get no red zones between
// tensors: whole-range passes (gradient buckets, AdamW over [lo,hi), allgather, zero-fill,
// checkpoints) run over them, so there only the allocator's tail past total() is poisoned
// (alloc/backend_direct.cc). tests/asan_poison_test.cc proves both.
class Activations {
 public:
  Activations(const Shape& shape, int B, int T, int threads);
  std::size_t floats() const { return total_; }
  int B() const { return B_; }
  int T() const { return T_; }
  // Points the views at `base` (floats() floats) and `tokens` (2*B*T ints: inputs, targets).
  void Bind(float* base, int* tokens);
  // Under ASan, poisons the padding and red zone after every view of the bound buffer (see
  // above); a no-op otherwise, or when nothing is bound. The memory is unpoisoned when it is
  // freed (NodeBuffer, or ASan's free for heap memory).
  void PoisonRedZones();

  int* inputs = nullptr;     // (B,T)
  int* targets = nullptr;    // (B,T)
  float* encoded = nullptr;  // (B,T,C)
  struct Layer {
    float *ln1, *ln1_mean, *ln1_rstd;  // (B,T,C) (B,T) (B,T)
    float* qkv;                        // (B,T,3C)
    float* att;                        // (B,NH,T,T)
    float* atty;                       // (B,T,C)
    float* attproj;                    // (B,T,C)
    float* residual2;                  // (B,T,C)
    float *ln2, *ln2_mean, *ln2_rstd;  // (B,T,C) (B,T) (B,T)
    float* fch;                        // (B,T,4C)
    float* fch_gelu;                   // (B,T,4C)
    float* fcproj;                     // (B,T,C)
    float* residual3;                  // (B,T,C)
  };
  std::vector<Layer> layers;
  float *lnf, *lnf_mean, *lnf_rstd;  // (B,T,C) (B,T) (B,T)
  float* logits;                     // (B,T,Vp); overwritten by dlogits in backward
  float* lse;                        // (B,T) log-sum-exp of each row of logits
  float* losses;                     // (B,T)
  // backward scratch
  float* dresidual;    // (B,T,C): the residual stream's gradient, flowing down the blocks
  float* dln;          // (B,T,C)
  float* datty;        // (B,T,C)
  float* dqkv;         // (B,T,3C)
  float* dfch;         // (B,T,4C)
  float* att_scratch;  // threads*T*T

 private:
  Shape shape_;
  int B_, T_, threads_;
  std::size_t total_ = 0;
  float* base_ = nullptr;
  // [begin, end) float offsets after each view: its padding, and the red zone under ASan.
  std::vector<std::pair<std::size_t, std::size_t>> red_zones_;
};

// train.precision: bf16 (docs/bf16.md). The products of the linear layers, the LM head and
// attention take bf16 operands and accumulate in fp32 (kernels/bf16.h); everything else, and every
// output and gradient, stays fp32. `weights` is a bf16 copy of the whole flat parameter buffer
// (same offsets), which the caller refreshes whenever the fp32 parameters change; `in` and `dout`
// are scratch for the converted product inputs and output gradients, `attn` for attention's
// per-worker bf16 copies of P and dS.
struct Bf16Operands {
  const uint16_t* weights = nullptr;  // layout.total()
  uint16_t* in = nullptr;             // InElems
  uint16_t* dout = nullptr;           // DoutElems
  uint16_t* attn = nullptr;           // AttnElems
  // Scratch sizes for B rows of T positions: the widest product input is (B,T,4C); the widest
  // output gradient is the LM head's (B,T,Vp).
  static std::size_t InElems(const Shape& s, int B, int T) {
    return static_cast<std::size_t>(B) * T * 4 * s.C;
  }
  static std::size_t DoutElems(const Shape& s, int B, int T) {
    return static_cast<std::size_t>(B) * T * (4 * s.C > s.Vp ? 4 * s.C : s.Vp);
  }
  // For a pool of `threads` workers (the Activations' threads).
  static std::size_t AttnElems(int threads, int T) {
    return kernels::AttentionScratchBf16(threads, T);
  }
};

// Forward over B rows of T tokens (acts.inputs, and acts.targets if with_loss). Returns the sum
// of the B*T position losses (0 if !with_loss); acts.logits holds the logits either way. bf16:
// run the products in bf16 (null: fp32).
double Forward(WorkerPool& pool, const ParamLayout& layout, const float* params, Activations& acts,
               int B, int T, bool with_loss, const Bf16Operands* bf16 = nullptr);

// Backward after Forward(with_loss). Writes every gradient in `grads` (same layout as params;
// padding rows and unused wpe rows are never written: keep them zero). dloss is d(loss)/d(each
// position's loss), 1/(global B*T) for a mean. on_ready(from) is called each time the range
// [from, layout.total()) of grads is final: after lnf, after each block (L-1 down to 0), and
// with 0 after the embeddings. accumulate: ADD every gradient into `grads` instead of writing it
// (gradient accumulation: each micro-batch after the first of a step); false is exactly the
// writing path. bf16: as in Forward (the same operands Forward ran with).
void Backward(WorkerPool& pool, const ParamLayout& layout, const float* params, float* grads,
              Activations& acts, int B, int T, float dloss, FunctionRef<void(std::size_t)> on_ready,
              bool accumulate = false, const Bf16Operands* bf16 = nullptr);

// Model FLOPs of one training step (forward + backward) per token, the usual accounting: 6 per
// parameter of the matrix products (incl. the LM head, V real rows) plus 12*L*T*C... see .cc.
double TrainFlopsPerToken(const Shape& s, int T);

}  // namespace cputrain::model
