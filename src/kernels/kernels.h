// kernels/: the GPT-2 layers as forward/backward pairs, run on a replica group's WorkerPool.
//
// Dimension letters (the same in every kernel): B batch rows (of this group), T time, C channels,
// OC output channels, V vocabulary, Vp padded vocabulary (row stride of logits and wte), NH heads,
// hs = C/NH head size, N = B*T rows of a (B,T,C) activation.
//
// Conventions:
//  - Every kernel splits its work statically over pool.size() threads, so for a given pool
//    size the order of every floating-point sum is fixed: results are bit-identical run to run.
//  - Backward kernels WRITE their parameter gradients (dweight, dbias, ...) — they do not add —
//    except EncoderBackward, which adds into dwte (the LM head, tied to wte, wrote it first).
//    With `accumulate` (gradient accumulation: every micro-batch after the first of a step) they
//    ADD every parameter gradient into what is there instead; accumulate=false is exactly the
//    writing path (same instructions, same results).
//    Gradients with respect to activations are written too, except LayerNormBackward, which
//    adds into dinp: that is the residual stream's gradient, flowing through every block.
//  - No kernel allocates; scratch space is passed in.
#pragma once

#include <cstddef>

#include "runtime/worker_pool.h"

namespace cputrain::kernels {

// Must be called once before any kernel: makes OpenBLAS single-threaded (each pool worker calls
// it on its own slice; docs/machine-notes.md: the pthread build set to one thread is safe for
// concurrent callers, the serial build is not — this refuses a serial build with a RuntimeError).
void InitBlas();

// out (B,T,C) = wte[inp[b,t]] + wpe[t]. inp (B,T), wte (Vp,C), wpe (maxT,C).
void EncoderForward(WorkerPool& pool, float* out, const int* inp, const float* wte,
                    const float* wpe, int B, int T, int C);
// dwte rows of the tokens in inp += dout rows (adds); dwpe rows [0,T) = sum over b of dout
// (writes; adds with accumulate).
void EncoderBackward(WorkerPool& pool, float* dwte, float* dwpe, const float* dout, const int* inp,
                     int B, int T, int C, bool accumulate = false);

// out (N,C) = (inp - mean) * rstd * weight + bias, eps 1e-5; mean, rstd (N) saved for backward.
void LayerNormForward(WorkerPool& pool, float* out, float* mean, float* rstd, const float* inp,
                      const float* weight, const float* bias, std::size_t N, int C);
// dinp (N,C) += d/dinp; dweight, dbias (C) written (added with accumulate).
void LayerNormBackward(WorkerPool& pool, float* dinp, float* dweight, float* dbias,
                       const float* dout, const float* inp, const float* weight, const float* mean,
                       const float* rstd, std::size_t N, int C, bool accumulate = false);

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

// Causal multi-head self-attention. qkv (B,T,3C) holds [q | k | v] per position, heads split
// as C = NH*hs. out (B,T,C). att (B,NH,T,T): the softmax probabilities, saved for backward
// (row t holds columns 0..t; the rest is zero).
void AttentionForward(WorkerPool& pool, float* out, float* att, const float* qkv, int B, int T,
                      int C, int NH);
// dqkv (B,T,3C) written. scratch: pool.size() * T * T floats.
void AttentionBackward(WorkerPool& pool, float* dqkv, float* scratch, const float* dout,
                       const float* qkv, const float* att, int B, int T, int C, int NH);
inline std::size_t AttentionScratchFloats(int threads, int T) {
  return static_cast<std::size_t>(threads) * T * T;
}

// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
void GeluForward(WorkerPool& pool, float* out, const float* inp, std::size_t n);
// dinp = gelu'(inp) * dout (written; dinp may alias dout).
void GeluBackward(WorkerPool& pool, float* dinp, const float* inp, const float* dout,
                  std::size_t n);

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
