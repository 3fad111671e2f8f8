// model/: the forward and backward passes of a decoder-only transformer, for every family
// (family.h says which norm, MLP activation and position encoding its blocks use; params.h where
// each tensor lives), the activation buffers they work in, and the KV cache generation decodes
// with. One block, written once: training, eval and generation all run it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/function_ref.h"
#include "kernels/bf16.h"
#include "model/params.h"
#include "model/shape.h"
#include "runtime/worker_pool.h"

namespace cputrain::model {

struct LoraPass;  // model/lora.h

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
//
// Gradient checkpointing (checkpoint = true; HF's gradient_checkpointing): only each block's
// output (the next block's input: a decoder's residual3, an encoder's ln2) is kept per layer;
// every other view of every layer is one working set the blocks share. Forward runs as always
// (each block overwrites the working set); Backward runs each block's forward again from its kept
// input before that block's backward (the last block's is still there), with the same kernels in
// the same order, so every gradient is bit-identical to the stored path's (tested per family).
// Cost: one more forward of L-1 blocks, less a decoder's MLP output product where no post-norm
// reads it. Memory: L-1 working sets fewer; the attention probabilities, (B,NH,T,T) per layer,
// are most of it at long T.
class Activations {
 public:
  Activations(const Shape& shape, int B, int T, int threads, bool checkpoint = false);
  std::size_t floats() const { return total_; }
  bool checkpointed() const { return checkpoint_; }
  int B() const { return B_; }
  int T() const { return T_; }
  // The ints `tokens` holds for B rows of T: 2*B*T (inputs, targets) for a decoder; an encoder's
  // inputs and token types (in the targets' place); then, for a task head, 3*B: each row's
  // length and labels.
  static std::size_t TokenInts(const Shape& s, int B, int T);
  // Points the views at `base` (floats() floats) and `tokens` (TokenInts ints).
  void Bind(float* base, int* tokens);
  // Under ASan, poisons the padding and red zone after every view of the bound buffer (see
  // above); a no-op otherwise, or when nothing is bound. The memory is unpoisoned when it is
  // freed (NodeBuffer, or ASan's free for heap memory).
  void PoisonRedZones();

  // Widths: Q = shape.qkv_width() (3C without GQA), A = shape.attn_width() (NH * head size: C
  // unless the family has its own head_dim), F = shape.ffn() (4C for GPT-2), Fin the MLP input
  // product's (F, or 2F for a gated MLP: gate|up), H = NH + NKV (the heads a q/k norm
  // normalizes), hs the head size. RMSNorm leaves the means empty; a view the family has not
  // (the q/k norm's, the post-norms') is null.
  int* inputs = nullptr;   // (B,T)
  int* targets = nullptr;  // (B,T) next tokens (decoders)
  // Encoders. types: (B,T) token types (the targets' memory; the families without types
  // ignore it); lengths (B): row b's first lengths[b] positions are real, the rest padding,
  // which every position's attention skips (Hugging Face's right-padded attention_mask).
  // Task heads: starts, ends (B): a span head's answer positions (T or more: ignored); a
  // classifier's label in starts (its pooled position goes to ends).
  int* types = nullptr;
  int* lengths = nullptr;
  int* starts = nullptr;
  int* ends = nullptr;
  float* encoded = nullptr;  // (B,T,C): the embeddings (an encoder's after their norm and dropout)
  float *emb, *emb_mean, *emb_rstd;  // (B,T,C) (B,T) (B,T): an encoder's sum before its norm
  struct Layer {
    float *ln1, *ln1_mean, *ln1_rstd;   // (B,T,C) (B,T) (B,T)
    float* qkv;                         // (B,T,Q), after the q/k norm and the rotary embedding
    float *qk_saved, *qk_rstd;          // (B,T,H,hs) (B,T,H): q and k before their norm
    float* att;                         // (B,NH,T,T)
    float* atty;                        // (B,T,A)
    float* attproj;                     // (B,T,C); shared by the layers without a post-norm
    float *attn_post, *attn_post_rstd;  // (B,T,C) (B,T): attproj after its post-norm
    float* residual2;                   // (B,T,C)
    float *ln2, *ln2_mean, *ln2_rstd;   // (B,T,C) (B,T) (B,T)
    float* fch;                         // (B,T,Fin)
    // fch_gelu is one buffer shared by every layer (valid inside the layer's pass only): the
    // backward recomputes it from fch.
    float* fch_gelu;                  // (B,T,F): the activation's output
    float* fcproj;                    // (B,T,C); the same buffer as attproj without post-norms
    float *mlp_post, *mlp_post_rstd;  // (B,T,C) (B,T): fcproj after its post-norm
    float* residual3;                 // (B,T,C)
  };
  std::vector<Layer> layers;
  float *lnf, *lnf_mean, *lnf_rstd;  // (B,T,C) (B,T) (B,T)
  // An encoder's lnf is the head's input: the last block's output after the head's dropout.
  float* logits;  // (B,T,Vp); a span head's (B,T,2), a classifier's (B,K); dlogits in backward
  // A classifier's (model/head.h; null for the other heads): each row's pooled state (B,C), the
  // pooling layer's output before and after its activation (and dropout) (B,C), their gradients
  // (B,C); its regression or multi-label targets (B,K).
  float *cls_in = nullptr, *cls_pre = nullptr, *cls_out = nullptr;
  float *cls_dout = nullptr, *cls_din = nullptr;
  float* label_values = nullptr;
  float* lse;     // (B,T) log-sum-exp of each row of logits; a span head's (B,2)
  float* losses;  // (B,T); a span head's (B,2): start, end
  // Dropout while training (Shape's probabilities, encoders; LoRA's lora_dropout on the adapters'
  // input, any family): off in evaluation. Each site's
  // mask is a pure function of (seed, layer, site, global element index), so any placement
  // drops the same elements: row0 is this buffer's first row in the global batch. The trainer
  // sets seed per step and micro-batch.
  struct Dropout {
    bool on = false;
    uint64_t seed = 0;
    uint64_t row0 = 0;
  } dropout;
  // backward scratch
  float* dresidual;            // (B,T,C): the residual stream's gradient, flowing down the blocks
  float* dln;                  // (B,T,C)
  float* datty;                // (B,T,A)
  float* dqkv;                 // (B,T,Q)
  float* dfch;                 // (B,T,Fin)
  float* dfch_act;             // (B,T,F): d of the activation's output (a gated MLP's; else unused)
  float* att_scratch;          // threads*T*T
  float *rope_cos, *rope_sin;  // (maxT, hs/2) rotary tables (families with rope; else empty)
  // The windowed layers' tables, when they have a RoPE base of their own (Gemma 3's local
  // layers: shape.rope_local_theta, no scaling); else null and they use rope_cos, rope_sin.
  float *rope_cos_local, *rope_sin_local;
  bool rope_ready = false;  // the tables are filled (Forward fills them once after Bind)
  // Packed rows (sft --packing: a row holds several documents), filled by the row source after
  // UsePacking(): each position's position id (RoPE's; restarting at 0 with each document) and
  // the first position of its document (attention stops there), (B,T) with the pass's T as the
  // rows' stride. Empty (the passes' plain causal rows) unless a row source packs.
  std::vector<int> positions, doc_start;
  void UsePacking() {
    if (positions.empty()) {
      positions.assign(static_cast<std::size_t>(B_) * T_, 0);
      doc_start.assign(static_cast<std::size_t>(B_) * T_, 0);
    }
  }
  const int* packed_positions() const { return positions.empty() ? nullptr : positions.data(); }
  const int* packed_doc_start() const { return doc_start.empty() ? nullptr : doc_start.data(); }

  // Unpadded rows: an encoder classifier's passes (model/encoder.cc) skip the padding. Only the
  // first position's state reaches the classifier, and attention masks the padded keys, so no
  // real position and no gradient depends on a padded one: the passes run on the real positions
  // alone, row b's `lengths[b]` of them packed from activation row row_start[b] (B+1 entries),
  // and row_index[r] is packed row r's padded position b*T + t (dropout masks count there: the
  // same bits as the padded pass). The products, norms and activations shrink by the padding's
  // share (about 40% on SST-2-like rows padded per batch), attention by more.
  struct Packed {
    std::vector<int> row_start;
    std::vector<uint32_t> row_index;
  };
  // The packing of B rows of T (at most the activations'), filled from lengths; null where the
  // passes stay padded: not an encoder classifier's activations, no lengths, or unpad off.
  const Packed* Unpad(int B, int T);
  // Tests turn it off to check the packed passes against the padded ones.
  bool unpad = true;

 private:
  Shape shape_;
  int B_, T_, threads_;
  bool checkpoint_ = false;
  Packed packed_;
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
// per-worker bf16 copies of P and dS. Under LoRA, `weights` is the frozen base's copy (the base
// layout's offsets); the adapters' terms and the saved modules' products run in fp32.
struct Bf16Operands {
  const uint16_t* weights = nullptr;  // layout.total()
  uint16_t* in = nullptr;             // InElems
  uint16_t* dout = nullptr;           // DoutElems
  uint16_t* attn = nullptr;           // AttnElems
  // Scratch sizes for B rows of T positions: the widest product input (or qkv, which attention
  // converts into `in`): (B,T,max(C, F, Q)); the widest output gradient: (B,T,max(Q, Fin, Vp)).
  static std::size_t InElems(const Shape& s, int B, int T);
  static std::size_t DoutElems(const Shape& s, int B, int T);
  // For a pool of `threads` workers (the Activations' threads).
  static std::size_t AttnElems(int threads, int T) {
    return kernels::AttentionScratchBf16(threads, T);
  }
};

// A KV cache for generation: the keys and values of every position fed so far, per layer,
// (L, capacity, NKV * head size) each (after the q/k norm and the rotary embedding). A windowed
// layer's new position attends to the cached positions of its window only. The capacity starts
// at min(maxT, 1024) positions and doubles as positions are fed (Reserve), up to maxT: a model of
// 131,072 positions does not hold a cache of all of them for a short generation.
struct KvCache {
  // For a pool of `threads` workers (the attention's scratch).
  KvCache(const Shape& s, int threads);
  // Room for n positions (n <= maxT): grows the capacity by doubling (at most to maxT), moving
  // every layer's filled rows to the new layout. Called by Forward before it appends.
  void Reserve(int n);
  std::vector<float> k, v;
  std::vector<float> scratch;
  int positions = 0;  // filled: [0, positions)
  int capacity = 0;   // positions each layer has room for
  int layers = 0, max_positions = 0, threads = 0;
  std::size_t row = 0;  // floats a position takes in a layer: NKV * head size
};

// Forward over B rows of T tokens (acts.inputs, and acts.targets if with_loss). Returns the sum
// of the B*T position losses (0 if !with_loss); acts.logits holds the logits either way. bf16:
// run the products in bf16 (null: fp32).
// cache (generation; B must be 1): the T tokens are positions cache->positions + [0, T), which
// attend to every cached position before them; their keys and values are appended.
// lora (model/lora.h; null: none): train adapters over the frozen base `params` (layout is the
// base's): each adapted product adds its sites' terms, saved modules are read from lora->params,
// LoRA's activations go to lora->acts. Not with a cache: generation merges the adapters
// (LoraMerge) instead.
double Forward(WorkerPool& pool, const ParamLayout& layout, const float* params, Activations& acts,
               int B, int T, bool with_loss, const Bf16Operands* bf16 = nullptr,
               KvCache* cache = nullptr, const LoraPass* lora = nullptr);

// Backward after Forward(with_loss). Writes every gradient in `grads` (same layout as params;
// padding rows and unused wpe rows are never written: keep them zero). dloss is d(loss)/d(each
// position's loss), 1/(global B*T) for a mean. on_ready(from) is called each time the range
// [from, layout.total()) of grads is final, at layout.ReadyPoints() in order: after the output
// tensors, after each block (L-1 down to 0), and with 0 after the embeddings. accumulate: ADD
// every gradient into `grads` instead of writing it (gradient accumulation: each micro-batch after
// the first of a step); false is exactly the writing path. bf16: as in Forward (the same operands
// Forward ran with).
// lora (the LoraPass Forward ran with): `grads` is the trainable buffer (lora->lora->layout()):
// the adapters' dA, dB and the saved modules' gradients; the base gets none (its weight products,
// norm and embedding gradients are not computed). on_ready reports ranges of that buffer, at its
// layout's ReadyPoints().
void Backward(WorkerPool& pool, const ParamLayout& layout, const float* params, float* grads,
              Activations& acts, int B, int T, float dloss, FunctionRef<void(std::size_t)> on_ready,
              bool accumulate = false, const Bf16Operands* bf16 = nullptr,
              const LoraPass* lora = nullptr);

// Model FLOPs of one training step (forward + backward) per token, the usual accounting: 6 per
// weight of the matrix products (incl. the LM head, V real rows) plus 12*L*T*A for attention,
// A = NH * head size (C unless the family has its own head_dim) (see .cc).
double TrainFlopsPerToken(const Shape& s, int T);

}  // namespace cputrain::model
