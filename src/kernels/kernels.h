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
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/worker_pool.h"

namespace cputrain::kernels {

// Must be called once before any kernel: makes OpenBLAS single-threaded (each pool worker calls
// it on its own slice; docs/machine-notes.md: the pthread build set to one thread is safe for
// concurrent callers, the serial build is not — this refuses a serial build with a RuntimeError).
void InitBlas();

// ---- which kernel runs a class of products
//
// The matrix products of a pass fall into classes (GemmClass), and each class runs on its own
// kernel: the fastest of those that run here, measured on the run's own shapes by
// kernels/calibrate.h (the calibration). A class's kernel is set before a run's workers start;
// every product of the class runs on it until it is set again.
enum class GemmClass : int {
  kFwd,          // a block's linear, forward: out (N,OC) = inp (N,C) @ W^T
  kDinp,         // its input gradient: dinp (N,C) = dout (N,OC) @ W
  kDweight,      // its weight gradient: dW (OC,C) = dout^T @ inp
  kHeadFwd,      // the same three for the head (the LM head C -> V; a task head)
  kHeadDinp,     //
  kHeadDweight,  //
  kAttnFwd,      // attention's per-head Q K^T and P V
  kAttnBwd,      // their gradients
  kLora,         // LoRA's rank-r products (forward and backward)
};
inline constexpr int kGemmClasses = 9;
// "fwd", "dinp", "dweight", "head.fwd", "head.dinp", "head.dweight", "attn.fwd", "attn.bwd",
// "lora".
const char* GemmClassName(GemmClass c);
std::optional<GemmClass> ParseGemmClass(const std::string& name);
// Which linear a Matmul* call computes: a block's (qkv, attention output, MLP) or the head's
// (kernels choose by class: kFwd or kHeadFwd, ...).
enum class GemmSite { kBlock, kHead };

// Which library runs the fp32 matrix products (every sgemm of the kernels below): OpenBLAS,
// oneDNN's matmul (kernels/onednn.h; builds with oneDNN) or our own AVX2 kernel
// (kernels/own_sgemm.h). auto: the calibration's choice per class (kernels/calibrate.h); before
// one ran (or where none runs: a tool, a test), the prior below. The environment's
// CPUTRAIN_FP32_KERNEL overrides auto (train.fp32_kernel sets it in a config) for every class.
enum class Fp32Kernel { kAuto, kOpenblas, kOnednn, kOwn };
inline constexpr const char* kFp32KernelEnv = "CPUTRAIN_FP32_KERNEL";
const char* Fp32KernelName(Fp32Kernel k);  // "auto", "openblas", "onednn", "own"
std::optional<Fp32Kernel> ParseFp32Kernel(const std::string& name);
// "" when `k` can run in this build on this CPU, else why not.
std::string Fp32KernelMissing(Fp32Kernel k);
// Every kernel that runs here (auto left out), OpenBLAS first.
std::vector<Fp32Kernel> Fp32Kernels();
// The prior: what runs before a calibration, and the tie-break between kernels it measured
// within a few percent of each other. OpenBLAS (allocation-free per call), or oneDNN where
// OpenBLAS runs a core narrower than the CPU's vectors (OpenblasCore) and oneDNN is built.
Fp32Kernel BestFp32Kernel();
// The core OpenBLAS runs (openblas_get_corename: "Haswell", "SkylakeX", "Prescott", ...), the
// width of its vectors in bits (128 for the SSE cores, 256 for AVX/AVX2 ones, 512 for AVX-512),
// the CPU's widest (512 with AVX-512F, else 256), and the OPENBLAS_CORETYPE that would match the
// CPU where the core is narrower ("" where it is not).
struct OpenblasCore {
  std::string name;
  int bits = 0, cpu_bits = 0;
  std::string better;
  bool narrower() const { return bits > 0 && bits < cpu_bits; }
};
OpenblasCore OpenblasCoreInfo();
// OpenBLAS runs a core narrower than the CPU's vectors.
bool OpenblasNarrowerThanCpu();
// Resolves `requested` (kAuto: $CPUTRAIN_FP32_KERNEL when set, else the prior) and makes it the
// kernel of every class; InputError naming `what` when it cannot run here. Returns the kernel. A
// forced kernel (named by `what` or the environment) is never replaced by a calibration.
Fp32Kernel UseFp32Kernel(Fp32Kernel requested, const std::string& what = "train.fp32_kernel");
// Whether the last UseFp32Kernel was forced (a kernel named by the config or the environment).
bool Fp32KernelForced();
// "fp32 products: onednn (oneDNN's matmul) for every class; chosen by train.fp32_kernel;
// OpenBLAS core Haswell": what runs before a calibration, or what was forced (`requested` says
// who chose: auto's prior, CPUTRAIN_FP32_KERNEL or train.fp32_kernel).
std::string Fp32KernelLine(Fp32Kernel active, Fp32Kernel requested);
// One class's kernel (the calibration's choice); `k` must run here.
void SetFp32Kernel(GemmClass c, Fp32Kernel k);
// The kernel class `c` runs now (first use without a choice: the prior's).
Fp32Kernel ActiveFp32Kernel(GemmClass c);
// C (M,N) = alpha op(A) op(B) + beta C (cblas_sgemm's row-major contract) on kernel `k` (not
// kAuto), whatever is active: bench gemm's rows and the tests. `k` must run here.
void SgemmOn(Fp32Kernel k, bool ta, bool tb, int M, int N, int K, float alpha, const float* A,
             int lda, const float* B, int ldb, float beta, float* C, int ldc);

// out (B,T,C) = wte[inp[b,t]] + wpe[t]. inp (B,T), wte (Vp,C), wpe (maxT,C). wpe == nullptr: a
// model without learned positions (Llama: RoPE inside attention instead), out = wte rows alone.
// types (B,T) and wtt (NTT,C) (BERT's token types, segment A/B): out = (wte[inp] + wtt[types]) +
// wpe[t], in Hugging Face's BertEmbeddings order; types == nullptr: no token types (the same bits
// as before they existed).
// packed (unpadded rows, as DropoutRowsForward's): out holds packed.N rows, row r the padded
// position i = packed.row_index[r] (= b*T + t) of inp and types, at position t = i % T; the
// default is the plain (B,T) layout.
struct PackedRows {
  std::size_t N = 0;
  const uint32_t* row_index = nullptr;  // null: not packed
};
void EncoderForward(WorkerPool& pool, float* out, const int* inp, const float* wte,
                    const float* wpe, int B, int T, int C, const int* types = nullptr,
                    const float* wtt = nullptr, const PackedRows& packed = {});
// dwte rows of the tokens in inp += dout rows (adds; null: skipped, a frozen embedding); dwpe
// rows [0,T) = sum over b of dout (writes; adds with accumulate). dwpe == nullptr (no positions,
// or frozen): only dwte. With types and dwtt
// (NTT,C): dwtt rows [0,NTT) = sum of the dout rows of the positions of each type (writes, rows
// no position uses included; adds with accumulate), NTT = BERT's type_vocab_size unless given.
// Every sum runs over positions in order whatever the pool size. packed: dout holds packed rows
// (EncoderForward's); each sum runs over the same positions in the same order, padding left out.
void EncoderBackward(WorkerPool& pool, float* dwte, float* dwpe, const float* dout, const int* inp,
                     int B, int T, int C, bool accumulate = false, const int* types = nullptr,
                     float* dwtt = nullptr, int NTT = 2, const PackedRows& packed = {});

// out (N,C) = (inp - mean) * rstd * weight + bias, rstd = 1/sqrt(var + eps) (GPT-2: 1e-5, BERT:
// 1e-12); mean, rstd (N) saved for backward.
void LayerNormForward(WorkerPool& pool, float* out, float* mean, float* rstd, const float* inp,
                      const float* weight, const float* bias, std::size_t N, int C,
                      float eps = 1e-5f);
// dinp (N,C) += d/dinp; dweight, dbias (C) written (added with accumulate); a null one is
// skipped (a frozen norm: both null skip the column pass entirely).
void LayerNormBackward(WorkerPool& pool, float* dinp, float* dweight, float* dbias,
                       const float* dout, const float* inp, const float* weight, const float* mean,
                       const float* rstd, std::size_t N, int C, bool accumulate = false);

// RMSNorm (Llama's LlamaRMSNorm, in fp32): out (N,C) = weight * (inp * rstd), rstd =
// 1/sqrt(mean(inp^2) + eps); rstd (N) saved for backward. weight_offset 1: Gemma's RMSNorm,
// (inp * rstd) * (1 + weight) (the weight stored is HF's, 0 for the identity).
void RmsNormForward(WorkerPool& pool, float* out, float* rstd, const float* inp,
                    const float* weight, std::size_t N, int C, float eps,
                    float weight_offset = 0.f);
// dinp (N,C) += d/dinp; dweight (C) written (added with accumulate; null: skipped, a frozen
// norm). weight_offset as in the forward.
void RmsNormBackward(WorkerPool& pool, float* dinp, float* dweight, const float* dout,
                     const float* inp, const float* weight, const float* rstd, std::size_t N, int C,
                     bool accumulate = false, float weight_offset = 0.f);

// RMSNorm of each query and key head (Qwen3's and Gemma 3's q_norm / k_norm), in place on qkv
// (N,(NH+2*NKV)*hs) (AttentionForward's layout): each of a row's NH query heads becomes
// (wq + weight_offset) * (x * rstd), each of its NKV key heads the same with wk (wq, wk: (hs));
// values untouched. saved (N,NH+NKV,hs) gets the heads before the norm, rstd (N,NH+NKV) theirs,
// for backward.
void QkNormForward(WorkerPool& pool, float* qkv, float* saved, float* rstd, const float* wq,
                   const float* wk, std::size_t N, int NH, int NKV, int hs, float eps,
                   float weight_offset = 0.f);
// In place on dqkv's query and key heads: d(out) on entry, d(in) on return (WRITTEN, not added);
// dwq, dwk (hs) written (added with accumulate; null: skipped, frozen).
void QkNormBackward(WorkerPool& pool, float* dqkv, float* dwq, float* dwk, const float* saved,
                    const float* rstd, const float* wq, const float* wk, std::size_t N, int NH,
                    int NKV, int hs, float weight_offset = 0.f, bool accumulate = false);

// How the matrix products split [0, n) between the pool's workers: worker tid's share, cut at
// multiples of 16. (bench gemm times the products with exactly this partition.)
void MatmulSlice(std::size_t n, int parts, int tid, std::size_t* b, std::size_t* e);

// out (N,OC) = inp (N,C) @ weight(OC,C)^T + bias(OC); bias may be null; out's row stride ldo.
// site: whose product it is (the kernel of class kFwd or kHeadFwd runs it).
void MatmulForward(WorkerPool& pool, float* out, const float* inp, const float* weight,
                   const float* bias, std::size_t N, int C, int OC, int ldo,
                   GemmSite site = GemmSite::kBlock);
// dinp (N,C) = dout @ weight (null: skipped); dweight (OC,C) = dout^T @ inp (null: skipped, a
// frozen weight); dbias (OC) = column sums of dout (null: skipped). All written; with accumulate
// dweight and dbias are added to (sgemm beta = 1; dbias's column sums continue from its value),
// dinp is still written. dout's row stride ldd.
void MatmulBackward(WorkerPool& pool, float* dinp, float* dweight, float* dbias, const float* dout,
                    const float* inp, const float* weight, std::size_t N, int C, int OC, int ldd,
                    bool accumulate = false, GemmSite site = GemmSite::kBlock);

// Dropout's keep decision, counter based: the same on every thread, pool size and placement; the
// caller derives `seed` per (run seed, step, micro-batch, layer, site) and `index` from the
// element's global position. The rule, exactly: h = Mix64(Mix64(seed) + (index + 1) *
// 0x9E3779B97F4A7C15) (splitmix64: its golden-ratio increment and output mix), kept iff (h >> 32)
// >= floor(p * 2^32). So P(drop) = floor(p * 2^32) / 2^32: p = 0 keeps everything, p = 1 nothing.
struct DropoutMask {
  static constexpr uint64_t Mix64(uint64_t z) {  // splitmix64's output function
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  DropoutMask(uint64_t seed, float p)
      : key(Mix64(seed)),
        threshold(static_cast<uint64_t>(static_cast<double>(p) * 4294967296.0)),
        scale(p < 1.f ? 1.f / (1.f - p) : 0.f) {}
  bool Keep(uint64_t index) const {
    return Mix64(key + (index + 1) * 0x9E3779B97F4A7C15ull) >> 32 >= threshold;
  }
  // dst[0, n) = src[0, n) kept (scaled) or zeroed, element i by index index0 + i (dst may be src).
  void Apply(float* dst, const float* src, std::size_t n, uint64_t index0) const {
    for (std::size_t i = 0; i < n; ++i) dst[i] = Keep(index0 + i) ? src[i] * scale : 0.f;
  }
  uint64_t key, threshold;
  float scale;  // 1/(1-p), as nn.Dropout scales what it keeps; 0 for p = 1
};
inline bool DropoutKeep(uint64_t seed, uint64_t index, float p) {
  return DropoutMask(seed, p).Keep(index);
}

// out (n) = inp * keep / (1-p) (nn.Dropout(p) in training), element i decided by
// DropoutKeep(seed, offset + i, p); out may be inp. p == 0: a copy (nothing when in place).
void DropoutForward(WorkerPool& pool, float* out, const float* inp, std::size_t n, float p,
                    uint64_t seed, uint64_t offset);
// dinp (n) = dout * keep / (1-p), the forward's mask; dinp may be dout.
void DropoutBackward(WorkerPool& pool, float* dinp, const float* dout, std::size_t n, float p,
                     uint64_t seed, uint64_t offset);

// Unpadded rows (an encoder classifier's passes skip the padding: model/encoder.cc): row r of a
// packed (rows, width) buffer stands for row row_index[r] of the padded (B*T, width) layout, whose
// element indices the masks count in, so a mask is the same bits packed or padded. The global
// index of element 0 of packed row r; row_index null: the plain layout, row r itself.
inline uint64_t RowElement(const uint32_t* row_index, std::size_t r, std::size_t width) {
  return static_cast<uint64_t>(row_index ? row_index[r] : r) * width;
}
// DropoutForward over `rows` packed rows of `width`: element c of row r is decided by index
// offset + RowElement(row_index, r, width) + c. row_index null: DropoutForward itself.
void DropoutRowsForward(WorkerPool& pool, float* out, const float* inp, std::size_t rows,
                        std::size_t width, float p, uint64_t seed, uint64_t offset,
                        const uint32_t* row_index);
// Its backward: the same mask (dinp may be dout).
void DropoutRowsBackward(WorkerPool& pool, float* dinp, const float* dout, std::size_t rows,
                         std::size_t width, float p, uint64_t seed, uint64_t offset,
                         const uint32_t* row_index);

// LoRA (model/lora.h) on one adapted linear layer, a "site": x (N,IC) the layer's input, A (r,IC)
// and B (rows,r) its adapters, scale = alpha / r; xd = dropout(x) as `drop` says (element i of x
// kept iff DropoutKeep(drop.seed, drop.offset + i, drop.p); p = 0: xd is x itself, no copy).
// row_index: unpadded rows, as DropoutRowsForward's (element c of x's row n at offset +
// RowElement(row_index, n, IC) + c); null: offset + n*IC + c.
struct LoraDropout {
  float p = 0.f;
  uint64_t seed = 0, offset = 0;
  const uint32_t* row_index = nullptr;
};
// out[:, 0:rows] += scale * h B^T with h (N,r) = xd A^T, saved for backward; out's row stride ldo
// (the caller offsets out to the site's first output column: Llama's q rows of the fused qkv).
// xd: (N,IC) scratch when drop.p > 0 (else unused; may be null). Rows split over the workers:
// each row's result is the same whatever the pool size.
void LoraForward(WorkerPool& pool, float* out, float* h, float* xd, const float* x, const float* A,
                 const float* B, std::size_t N, int IC, int r, int rows, int ldo, float scale,
                 const LoraDropout& drop);
// Its backward from dout (N,rows), row stride ldd, with the forward's h and drop: dB (rows,r) =
// scale dout^T h; dh (N,r) = scale dout B (scratch, written); dA (r,IC) = dh^T xd (xd recomputed
// into the scratch when drop.p > 0); dA and dB written (added to with accumulate), each element's
// sum over the N rows one sgemm (split over dB's rows and dA's columns, as MatmulBackward splits
// dweight). dinp (N,IC) += dropout'(dh A): ADDS (the base product's backward wrote dinp first;
// null: skipped).
void LoraBackward(WorkerPool& pool, float* dinp, float* dA, float* dB, float* dh, float* xd,
                  const float* dout, const float* x, const float* h, const float* A, const float* B,
                  std::size_t N, int IC, int r, int rows, int ldd, float scale,
                  const LoraDropout& drop, bool accumulate = false);

// How attention masks, scales and drops. kv_len null: causal (GPT-2, Llama; as before,
// bit-identical). window > 0 (causal only): sliding-window attention, row t attends keys
// (t - window, t], transformers' sliding_window (Mistral; Gemma 3's, Qwen2's windowed layers).
// scale > 0: the scores' scale (Gemma's query_pre_attn_scalar^-1/2); 0: 1/sqrt(hs).
// kv_len (B): bidirectional (BERT): every query position of row b, padded ones included, attends to
// keys [0, kv_len[b]) (Hugging Face's right-padded attention_mask: 1 for the first kv_len[b]
// positions); 1 <= kv_len[b] <= T. Masked keys get probability exactly 0 (HF adds finfo.min: the
// same to fp32). dropout > 0: the probabilities P are dropped as nn.Dropout(p) does (kept ones
// scaled by 1/(1-p)) before P v; `att` keeps the undropped P. Element (b, h, t, s) is kept iff
// DropoutKeep(dropout_seed, dropout_offset + ((b*NH + h)*T + t)*T + s, dropout); backward
// regenerates the mask from the same options.
struct AttentionOptions {
  const int* kv_len = nullptr;
  // Causal only: doc_start (B,T), the first key of each query position's document (packed rows:
  // each document attends within itself; 0 <= doc_start[b*T + t] <= t). Null: every row is one
  // document.
  const int* doc_start = nullptr;
  // Bidirectional only: unpadded rows (an encoder classifier's pass). qkv, out (and dqkv, dout)
  // hold row b's kv_len[b] real positions alone, from row row_start[b] (B+1 entries, row_start[0]
  // = 0, row_start[b+1] = row_start[b] + kv_len[b]); att holds, for each (b, h) in order, a
  // (kv_len[b], kv_len[b]) block. The padded query rows are not computed (nothing reads them in
  // a classifier); the real ones get the padded pass's values, dropout masks included (indexed as
  // there). Null: the padded (B,T) layout.
  const int* row_start = nullptr;
  int window = 0;
  float scale = 0.f;
  float dropout = 0.f;
  uint64_t dropout_seed = 0;
  uint64_t dropout_offset = 0;
};

// Self-attention, multi-head or grouped-query, causal unless `opt` says otherwise. qkv (B,T,R),
// R = (NH + 2*NKV)*hs, holds [q (NH*hs) | k (NKV*hs) | v (NKV*hs)] per position, hs = C/NH (C is
// attention's width NH*hs, which a family with its own head_dim has apart from the model's); query
// head h attends with key and value head h / (NH/NKV) (Hugging Face's repeat_kv order). NKV must
// divide NH; NKV = 0 means NH, and then qkv is GPT-2's (B,T,3C). out (B,T,C). att (B,NH,T,T): the
// softmax probabilities, saved for backward (causal: row t holds columns 0..t; bidirectional:
// columns [0, kv_len[b]); the rest is zero).
void AttentionForward(WorkerPool& pool, float* out, float* att, const float* qkv, int B, int T,
                      int C, int NH, int NKV = 0, const AttentionOptions& opt = {});
// dqkv (B,T,R) written: the dk and dv of a key/value head sum its NH/NKV query heads' parts (in
// head order, within one task); dk, dv of masked keys are 0. scratch: AttentionScratchFloats(
// pool.size(), T). `opt` as in the forward.
void AttentionBackward(WorkerPool& pool, float* dqkv, float* scratch, const float* dout,
                       const float* qkv, const float* att, int B, int T, int C, int NH, int NKV = 0,
                       const AttentionOptions& opt = {});
// Per worker: one head's dS (T x T).
inline std::size_t AttentionScratchFloats(int threads, int T) {
  return static_cast<std::size_t>(threads) * T * T;
}
// Generation with a KV cache: one new position attends to the cached positions [0, n) (itself
// included, as the last). q (NH*hs); k_cache, v_cache: row j (stride ld floats) starts with the
// NKV*hs keys / values of position j (NKV = 0: NH); out (NH*hs). Equals AttentionForward's row n-1
// for the same data up to summation order. scratch: pool.size() * n floats. scale: the scores'
// (0: 1/sqrt(hs)). A sliding window is the caller's: it passes the window's rows of the cache.
void AttentionDecode(WorkerPool& pool, float* out, float* scratch, const float* q,
                     const float* k_cache, const float* v_cache, int n, int NH, int NKV, int hs,
                     int ld, float scale = 0.f);

// Rotary position embeddings (RoPE), Hugging Face's convention: a head's vector x (hs, even) is two
// halves x1 = x[:hs/2], x2 = x[hs/2:], and position p turns each pair (x1[i], x2[i]) by the angle
// p * inv_freq[i]: out1 = x1 cos - x2 sin, out2 = x2 cos + x1 sin.
struct RopeScaling {
  // kLlama3: Llama 3.1's long-context rescaling of inv_freq (rope_type "llama3"); kLinear:
  // inv_freq / factor (rope_type "linear": Gemma 3's global layers).
  enum Kind { kNone, kLlama3, kLinear } kind = kNone;
  float factor = 1, low_freq_factor = 1, high_freq_factor = 4;
  int original_max_position = 8192;
};
// cos, sin (maxT, hs/2): row p, column i = cos/sin(p * inv_freq[i]), inv_freq[i] = 1 /
// theta^(2i/hs) then `scaling`, with the fp32 operations of transformers' rope initialisation
// (transformers.modeling_rope_utils: _compute_default_rope_parameters, _compute_llama3_parameters,
// _compute_linear_scaling_rope_parameters)
// and its fp32 angle p * inv_freq; cos and sin rounded from double. Runs on the calling thread
// (once per model).
void RopeTables(float* cos, float* sin, int maxT, int hs, float theta, const RopeScaling& scaling);
// Rotates, in place, the NH query and NKV key heads of qkv (B,T,(NH+2*NKV)*hs) (AttentionForward's
// layout); v untouched. Row t is at position pos0 + t (decoding: pos0 is the cache's length), which
// must be a row of the tables.
// pos (B,T), if given: each row's own position instead (packed rows restart at each document).
void RopeForward(WorkerPool& pool, float* qkv, const float* cos, const float* sin, int B, int T,
                 int NH, int NKV, int hs, int pos0 = 0, const int* pos = nullptr);
// The transposed rotation, in place on dq and dk of dqkv (B,T,(NH+2*NKV)*hs) (rows at positions
// 0..T-1); dv untouched.
void RopeBackward(WorkerPool& pool, float* dqkv, const float* cos, const float* sin, int B, int T,
                  int NH, int NKV, int hs, const int* pos = nullptr);

// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
void GeluForward(WorkerPool& pool, float* out, const float* inp, std::size_t n);
// dinp = gelu'(inp) * dout (written; dinp may alias dout).
void GeluBackward(WorkerPool& pool, float* dinp, const float* inp, const float* dout,
                  std::size_t n);

// GELU, exact (BERT's "gelu"; torch.nn.functional.gelu(approximate='none')): x Phi(x) = 0.5 x
// (1 + erf(x/sqrt(2))), Phi the standard normal CDF.
void GeluErfForward(WorkerPool& pool, float* out, const float* inp, std::size_t n);
// dinp = (Phi(inp) + inp phi(inp)) * dout (written; dinp may alias dout), phi the normal density.
void GeluErfBackward(WorkerPool& pool, float* dinp, const float* inp, const float* dout,
                     std::size_t n);

// out = tanh(inp) (BERT's pooler).
void TanhForward(WorkerPool& pool, float* out, const float* inp, std::size_t n);
// dinp = (1 - out^2) * dout, from the forward's output (written; dinp may alias dout).
void TanhBackward(WorkerPool& pool, float* dinp, const float* out, const float* dout,
                  std::size_t n);

// GeGLU, Gemma's MLP activation: gu (N,2F) as SwiGLU's; out (N,F) = gelu(gate) * up with the
// tanh GELU above (gelu_pytorch_tanh).
void GegluForward(WorkerPool& pool, float* out, const float* gu, std::size_t N, int F);
// dgu (N,2F) written: [dout * up * gelu'(gate) | dout * gelu(gate)].
void GegluBackward(WorkerPool& pool, float* dgu, const float* gu, const float* dout, std::size_t N,
                   int F);

// x (n) *= s, in place (Gemma's embeddings times sqrt(C), and their gradient).
void ScaleInPlace(WorkerPool& pool, float* x, std::size_t n, float s);

// SwiGLU, Llama's MLP activation: gu (N,2F) is the fused gate and up product, [gate | up] per
// row; out (N,F) = silu(gate) * up, silu(x) = x * sigmoid(x).
void SwigluForward(WorkerPool& pool, float* out, const float* gu, std::size_t N, int F);
// dgu (N,2F) written: [dout * up * silu'(gate) | dout * silu(gate)].
void SwigluBackward(WorkerPool& pool, float* dgu, const float* gu, const float* dout, std::size_t N,
                    int F);

// out = a + b, n elements.
void ResidualForward(WorkerPool& pool, float* out, const float* a, const float* b, std::size_t n);

// Cross-entropy of softmax(logits) over the real vocabulary [0,V) of each row of logits (N,Vp):
// losses (N) = logsumexp - logits[target]; lse (N) saved for backward (may be null). A negative
// target is ignored (PyTorch's ignore_index -100: the labels fine-tuning masks, sft's prompts and
// padding): its loss is 0 and its row gets no gradient.
void CrossEntropyForward(WorkerPool& pool, float* losses, float* lse, const float* logits,
                         const int* targets, std::size_t N, int V, int Vp);
// dlogits (N,Vp), columns [0,V) = (softmax - onehot(target)) * dloss, written in place over the
// logits (dlogits == logits allowed); padding columns untouched. An ignored row's columns [0,V)
// are 0.
void CrossEntropyBackward(WorkerPool& pool, float* dlogits, const float* logits, const float* lse,
                          const int* targets, float dloss, std::size_t N, int V, int Vp);

// The span loss of extractive question answering (BertForQuestionAnswering): logits (B,T,2),
// [b,t,0] the start logit and [b,t,1] the end logit of position t (what Linear(C,2) writes).
// losses (B,2): [b,0] = cross-entropy of the softmax over t of the start logits against starts[b],
// [b,1] the same for the ends against ends[b]; a label outside [0,T) (Hugging Face clamps labels
// to T, its ignore_index) gives loss 0 and no gradient. lse (B,2): the logsumexps, saved.
void SpanCrossEntropyForward(WorkerPool& pool, float* losses, float* lse, const float* logits,
                             const int* starts, const int* ends, int B, int T);
// dlogits (B,T,2) written (may alias logits): [b,t,0] = (softmax - onehot(starts[b])) *
// dloss_start for a kept label, 0 for an ignored one; [b,t,1] the same for ends with dloss_end.
void SpanCrossEntropyBackward(WorkerPool& pool, float* dlogits, const float* logits,
                              const float* lse, const int* starts, const int* ends,
                              float dloss_start, float dloss_end, int B, int T);

}  // namespace cputrain::kernels
