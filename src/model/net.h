// model/ internal: what the forward and backward passes share (transformer.cc runs the decoder
// families, encoder.cc the encoder families; net.cc): the shape, the family's kind of block, the
// widths, and the buffers a pass reads and writes, with or without LoRA.
#pragma once

#include <cstddef>

#include "common/function_ref.h"
#include "kernels/kernels.h"
#include "model/family.h"
#include "model/lora.h"
#include "model/params.h"
#include "model/transformer.h"

namespace cputrain::model {

// A pass over one batch, and the buffers it reads and writes. Without LoRA, `params` holds every
// tensor and `grads` (same layout; null in forward) gets every gradient. With LoRA
// (model/lora.h), `params` is the frozen base and `grads` the trainable buffer (LoRA layout):
// P() reads a module to save from the trainable buffer, G() is null for a frozen tensor (its
// gradient is not computed), and Linear / LinearBack add the sites' adapters to the base product.
class Net {
 public:
  // packed: the pass runs on unpadded rows (Activations::Unpad: an encoder classifier's); null:
  // the (B,T) layout.
  Net(const ParamLayout& layout, int B, int T, const float* params, float* grads,
      const LoraPass* lora, const Activations::Dropout& dropout,
      const Activations::Packed* packed = nullptr);
  // Tensor t's copy for layer l that the pass reads (the base's, or under LoRA a saved module's
  // in the trainable buffer), or null if the family has no such tensor (a bias; kNumTensors).
  const float* P(Tensor t, int l = 0) const;
  // Where t's gradient for layer l goes, or null: no such tensor, or frozen under LoRA.
  float* G(Tensor t, int l = 0) const;
  // The layout of `grads`: on_ready reports ranges of it, at its ReadyPoints().
  const ParamLayout& trained() const { return trained_; }
  // The same buffers for a pass over B rows of T positions (a head's products over the pooled
  // rows: model/head.h). Not for LoRA-adapted products (their activations are laid out for the
  // pass's rows).
  Net Rows(int rows, int positions) const {
    return Net(layout, rows, positions, params_, grads_, lora_, dropout_);
  }
  // out (N,OC) = inp (N,IC) @ w^T + bias of layer l (b may be absent), in fp32 or with bf16
  // operands (null: fp32; a saved module's product runs in fp32 from the trainable buffer, the
  // base's bf16 copy not holding it), plus each LoRA site of w in fp32 into its rows; out's row
  // stride ldo.
  void Linear(WorkerPool& pool, const Bf16Operands* bf16, float* out, const float* inp, Tensor w,
              Tensor b, int l, int IC, int OC, int ldo) const;
  // Its backward from dout (N,OC), row stride ldd: dinp (N,IC) written (the sites' shares added);
  // w's and b's gradients (if not frozen) and the sites' dA, dB written, or added to with
  // accumulate.
  void LinearBack(WorkerPool& pool, const Bf16Operands* bf16, float* dinp, Tensor w, Tensor b,
                  int l, const float* dout, const float* inp, int IC, int OC, int ldd,
                  bool accumulate) const;
  // Whose products w's are, for the kernel choice (kernels.h GemmSite): the LM head, the pooler
  // and the task head are the head's; the rest a block's.
  static kernels::GemmSite Site(Tensor w);
  // Whether LinearBack reads `inp` for w of layer l: w's gradient is computed (G non-null), or a
  // LoRA site adapts w (its dA). A frozen, unadapted product needs only dout.
  bool ReadsInput(Tensor w, int l) const {
    return G(w, l) != nullptr || (lora_ && !lora_->lora->SitesOf(w).empty());
  }

  const ParamLayout& layout;  // of params (the base under LoRA)
  const Shape& s;
  const BlockKind& kind;
  // Widths (transformer.h, Activations); A = NH * hs, attention's (C unless the family has its
  // own head size).
  const int C, NH, KV, hs, Q, A, F, Fin;
  const float norm_offset;  // RMSNorm's weight offset: 1 for (1 + w) norms (Gemma), else 0
  const float attn_scale;   // attention's score scale (0: 1/sqrt(hs); Gemma's own)
  const int B, T;
  const std::size_t N;  // rows of the pass's activations: B*T, or the packed positions
  // Unpadded rows: row b starts at row_start[b] (null: b*T); row r stands for padded position
  // row_index[r] (null: r), where the dropout masks count.
  const int* row_start = nullptr;
  const uint32_t* row_index = nullptr;
  // The activation row of position t of batch row b.
  std::size_t Pos(int b, int t) const {
    return (row_start ? static_cast<std::size_t>(row_start[b]) : static_cast<std::size_t>(b) * T) +
           t;
  }

 private:
  // LoRA's views into lora_->acts (Lora::ActFloats): site i's h of layer l, dh, the dropped input.
  float* LoraH(int l, const LoraSite& site) const;
  float* LoraDh() const;
  float* LoraXd() const;
  kernels::LoraDropout LoraDrop(int l, const LoraSite& site) const;

  const float* params_;
  float* grads_;
  const LoraPass* lora_;  // null: no LoRA
  const ParamLayout& trained_;
  const Activations::Dropout dropout_;
};

// x[0, n) = 0, split over the pool's workers.
void ZeroFill(WorkerPool& pool, float* x, std::size_t n);

// Forward and Backward (transformer.h) for an encoder family (BlockKind::encoder).
double EncoderForwardPass(WorkerPool& pool, const ParamLayout& layout, const float* params,
                          Activations& a, int B, int T, bool with_loss, const Bf16Operands* bf16,
                          const LoraPass* lora);
void EncoderBackwardPass(WorkerPool& pool, const ParamLayout& layout, const float* params,
                         float* grads, Activations& a, int B, int T, float dloss,
                         FunctionRef<void(std::size_t)> on_ready, bool accumulate,
                         const Bf16Operands* bf16, const LoraPass* lora);

}  // namespace cputrain::model
