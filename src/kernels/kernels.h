// kernels/: the GPT-2 and Llama layers as forward/backward pairs, run on a replica group's
// WorkerPool.
//
// Dimension letters (the same in every kernel): B batch rows (of this group), T time, C channels,
// OC output channels, V vocabulary, Vp padded vocabulary (row stride of logits and wte), NH
// (query) heads, NKV key/value heads (grouped-query attention; NKV = NH is multi-head attention),
// hs = C/NH head size, N = B*T rows of a (B,T,C) activation, F the MLP's hidden width.
//
// Conventions:
//  - Every kernel splits its work statically over pool.size() threads, so for a given pool
//    size the order of every floating-point sum is fixed: results are bit-identical run to run.
//  - Backward kernels WRITE their parameter gradients (dweight, dbias, ...) — they do not add —
//    except EncoderBackward, which adds into dwte (the LM head, tied to wte, wrote it first).
//    With `accumulate` (gradient accumulation: every micro-batch after the first of a step) they
//    ADD every parameter gradient into what is there instead; accumulate=false is exactly the
//    writing path (same instructions, same results).
//    Gradients with respect to activations are written too, except LayerNormBackward and
//    RmsNormBackward, which add into dinp: that is the residual stream's gradient, flowing
//    through every block.
//  - No kernel allocates; scratch space is passed in.
#pragma once

#include <cstddef>

#include "runtime/worker_pool.h"

namespace cputrain::kernels {

// Must be called once before any kernel: makes OpenBLAS single-threaded (each pool worker calls
// it on its own slice; docs/machine-notes.md: the pthread build set to one thread is safe for
// concurrent callers, the serial build is not — this refuses a serial build with a RuntimeError).
void InitBlas();

// out (B,T,C) = wte[inp[b,t]] + wpe[t]. inp (B,T), wte (Vp,C), wpe (maxT,C). wpe == nullptr: a
// model without learned positions (Llama: RoPE inside attention instead), out = wte rows alone.
void EncoderForward(WorkerPool& pool, float* out, const int* inp, const float* wte,
                    const float* wpe, int B, int T, int C);
// dwte rows of the tokens in inp += dout rows (adds); dwpe rows [0,T) = sum over b of dout
// (writes; adds with accumulate). dwpe == nullptr (no positions): only dwte.
void EncoderBackward(WorkerPool& pool, float* dwte, float* dwpe, const float* dout, const int* inp,
                     int B, int T, int C, bool accumulate = false);

// out (N,C) = (inp - mean) * rstd * weight + bias, rstd = 1/sqrt(var + eps) (GPT-2: 1e-5, BERT:
// 1e-12); mean, rstd (N) saved for backward.
void LayerNormForward(WorkerPool& pool, float* out, float* mean, float* rstd, const float* inp,
                      const float* weight, const float* bias, std::size_t N, int C,
                      float eps = 1e-5f);
// dinp (N,C) += d/dinp; dweight, dbias (C) written (added with accumulate).
void LayerNormBackward(WorkerPool& pool, float* dinp, float* dweight, float* dbias,
                       const float* dout, const float* inp, const float* weight, const float* mean,
                       const float* rstd, std::size_t N, int C, bool accumulate = false);

// RMSNorm (Llama's LlamaRMSNorm, in fp32): out (N,C) = weight * (inp * rstd), rstd =
// 1/sqrt(mean(inp^2) + eps); rstd (N) saved for backward.
void RmsNormForward(WorkerPool& pool, float* out, float* rstd, const float* inp,
                    const float* weight, std::size_t N, int C, float eps);
// dinp (N,C) += d/dinp; dweight (C) written (added with accumulate).
void RmsNormBackward(WorkerPool& pool, float* dinp, float* dweight, const float* dout,
                     const float* inp, const float* weight, const float* rstd, std::size_t N, int C,
                     bool accumulate = false);

// How the matrix products split [0, n) between the pool's workers: worker tid's share, cut at
// multiples of 16. (bench gemm times the products with exactly this partition.)
void MatmulSlice(std::size_t n, int parts, int tid, std::size_t* b, std::size_t* e);

// out (N,OC) = inp (N,C) @ weight(OC,C)^T + bias(OC); bias may be null; out's row stride ldo.
void MatmulForward(WorkerPool& pool, float* out, const float* inp, const float* weight,
                   const float* bias, std::size_t N, int C, int OC, int ldo);
// dinp (N,C) = dout @ weight (null: skipped); dweight (OC,C) = dout^T @ inp; dbias (OC) = column
// sums of dout (null: skipped). All written; with accumulate dweight and dbias are added to
// (sgemm beta = 1; dbias's column sums continue from its value), dinp is still written. dout's
// row stride ldd.
void MatmulBackward(WorkerPool& pool, float* dinp, float* dweight, float* dbias, const float* dout,
                    const float* inp, const float* weight, std::size_t N, int C, int OC, int ldd,
                    bool accumulate = false);

// Causal self-attention, multi-head or grouped-query. qkv (B,T,R), R = (NH + 2*NKV)*hs, holds
// [q (NH*hs) | k (NKV*hs) | v (NKV*hs)] per position, hs = C/NH; query head h attends with key
// and value head h / (NH/NKV) (Hugging Face's repeat_kv order). NKV must divide NH; NKV = 0 means
// NH, and then qkv is GPT-2's (B,T,3C). out (B,T,C). att (B,NH,T,T): the softmax probabilities,
// saved for backward (row t holds columns 0..t; the rest is zero).
void AttentionForward(WorkerPool& pool, float* out, float* att, const float* qkv, int B, int T,
                      int C, int NH, int NKV = 0);
// dqkv (B,T,R) written: the dk and dv of a key/value head sum its NH/NKV query heads' parts (in
// head order, within one task). scratch: AttentionScratchFloats(pool.size(), T).
void AttentionBackward(WorkerPool& pool, float* dqkv, float* scratch, const float* dout,
                       const float* qkv, const float* att, int B, int T, int C, int NH,
                       int NKV = 0);
// Per worker: one head's dS (T x T).
inline std::size_t AttentionScratchFloats(int threads, int T) {
  return static_cast<std::size_t>(threads) * T * T;
}
// Generation with a KV cache: one new position attends to the cached positions [0, n) (itself
// included, as the last). q (NH*hs); k_cache, v_cache: row j (stride ld floats) starts with the
// NKV*hs keys / values of position j (NKV = 0: NH); out (NH*hs). Equals AttentionForward's row n-1
// for the same data up to summation order. scratch: pool.size() * n floats.
void AttentionDecode(WorkerPool& pool, float* out, float* scratch, const float* q,
                     const float* k_cache, const float* v_cache, int n, int NH, int NKV, int hs,
                     int ld);

// Rotary position embeddings (RoPE), Hugging Face's convention: a head's vector x (hs, even) is two
// halves x1 = x[:hs/2], x2 = x[hs/2:], and position p turns each pair (x1[i], x2[i]) by the angle
// p * inv_freq[i]: out1 = x1 cos - x2 sin, out2 = x2 cos + x1 sin.
struct RopeScaling {
  // kLlama3: Llama 3.1's long-context rescaling of inv_freq (rope_type "llama3").
  enum Kind { kNone, kLlama3 } kind = kNone;
  float factor = 1, low_freq_factor = 1, high_freq_factor = 4;
  int original_max_position = 8192;
};
// cos, sin (maxT, hs/2): row p, column i = cos/sin(p * inv_freq[i]), inv_freq[i] = 1 /
// theta^(2i/hs) then `scaling`, with the fp32 operations of transformers' rope initialisation
// (transformers.modeling_rope_utils: _compute_default_rope_parameters, _compute_llama3_parameters)
// and its fp32 angle p * inv_freq; cos and sin rounded from double. Runs on the calling thread
// (once per model).
void RopeTables(float* cos, float* sin, int maxT, int hs, float theta, const RopeScaling& scaling);
// Rotates, in place, the NH query and NKV key heads of qkv (B,T,(NH+2*NKV)*hs) (AttentionForward's
// layout); v untouched. Row t is at position pos0 + t (decoding: pos0 is the cache's length), which
// must be a row of the tables.
void RopeForward(WorkerPool& pool, float* qkv, const float* cos, const float* sin, int B, int T,
                 int NH, int NKV, int hs, int pos0 = 0);
// The transposed rotation, in place on dq and dk of dqkv (B,T,(NH+2*NKV)*hs) (rows at positions
// 0..T-1); dv untouched.
void RopeBackward(WorkerPool& pool, float* dqkv, const float* cos, const float* sin, int B, int T,
                  int NH, int NKV, int hs);

// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
void GeluForward(WorkerPool& pool, float* out, const float* inp, std::size_t n);
// dinp = gelu'(inp) * dout (written; dinp may alias dout).
void GeluBackward(WorkerPool& pool, float* dinp, const float* inp, const float* dout,
                  std::size_t n);

// SwiGLU, Llama's MLP activation: gu (N,2F) is the fused gate and up product, [gate | up] per
// row; out (N,F) = silu(gate) * up, silu(x) = x * sigmoid(x).
void SwigluForward(WorkerPool& pool, float* out, const float* gu, std::size_t N, int F);
// dgu (N,2F) written: [dout * up * silu'(gate) | dout * silu(gate)].
void SwigluBackward(WorkerPool& pool, float* dgu, const float* gu, const float* dout, std::size_t N,
                    int F);

// out = a + b, n elements.
void ResidualForward(WorkerPool& pool, float* out, const float* a, const float* b, std::size_t n);

// Cross-entropy of softmax(logits) over the real vocabulary [0,V) of each row of logits (N,Vp):
// losses (N) = logsumexp - logits[target]; lse (N) saved for backward (may be null).
void CrossEntropyForward(WorkerPool& pool, float* losses, float* lse, const float* logits,
                         const int* targets, std::size_t N, int V, int Vp);
// dlogits (N,Vp), columns [0,V) = (softmax - onehot(target)) * dloss, written in place over the
// logits (dlogits == logits allowed); padding columns untouched.
void CrossEntropyBackward(WorkerPool& pool, float* dlogits, const float* logits, const float* lse,
                          const int* targets, float dloss, std::size_t N, int V, int Vp);

}  // namespace cputrain::kernels
