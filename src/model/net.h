// model/ internal: what the forward and backward passes share (transformer.cc runs the decoder
// families, encoder.cc the encoder families): the shape, the family's kind of block, the widths,
// and the tensors of one flat buffer.
#pragma once

#include <cstddef>

#include "common/function_ref.h"
#include "model/family.h"
#include "model/params.h"
#include "model/transformer.h"

namespace cputrain::model {

struct Net {
  Net(const ParamLayout& layout, int B, int T)
      : layout(layout),
        s(layout.shape()),
        kind(FamilyOf(s.arch).kind),
        C(s.C),
        NH(s.NH),
        KV(s.kv_heads()),
        hs(s.head_size()),
        Q(s.qkv_width()),
        F(s.ffn()),
        Fin(s.mlp_in_width()),
        N(static_cast<std::size_t>(B) * T) {}
  // Tensor t's copy for layer l in `flat`, or null if the family has no such tensor (a bias).
  template <class P>
  P* At(P* flat, Tensor t, int l = 0) const {
    return t < kNumTensors && layout.has(t) ? flat + layout.offset(t, l) : nullptr;
  }
  // out (N,OC) = inp (N,IC) @ w^T + bias of layer l (b may be absent), in fp32 or with bf16
  // operands (null: fp32); out's row stride ldo.
  void Linear(WorkerPool& pool, const float* params, const Bf16Operands* bf16, float* out,
              const float* inp, Tensor w, Tensor b, int l, int IC, int OC, int ldo) const;
  // Its backward from dout (N,OC), row stride ldd: dinp (N,IC) written; w's and b's gradients
  // written, or added to with accumulate.
  void LinearBack(WorkerPool& pool, const float* params, float* grads, const Bf16Operands* bf16,
                  float* dinp, Tensor w, Tensor b, int l, const float* dout, const float* inp,
                  int IC, int OC, int ldd, bool accumulate) const;
  const ParamLayout& layout;
  const Shape& s;
  const BlockKind& kind;
  const int C, NH, KV, hs, Q, F, Fin;
  const std::size_t N;
};

// x[0, n) = 0, split over the pool's workers.
void ZeroFill(WorkerPool& pool, float* x, std::size_t n);

// Forward and Backward (transformer.h) for an encoder family (BlockKind::encoder).
double EncoderForwardPass(WorkerPool& pool, const ParamLayout& layout, const float* params,
                          Activations& a, int B, int T, bool with_loss, const Bf16Operands* bf16);
void EncoderBackwardPass(WorkerPool& pool, const ParamLayout& layout, const float* params,
                         float* grads, Activations& a, int B, int T, float dloss,
                         FunctionRef<void(std::size_t)> on_ready, bool accumulate,
                         const Bf16Operands* bf16);

}  // namespace cputrain::model
