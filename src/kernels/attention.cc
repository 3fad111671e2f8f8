// Multi-head and grouped-query attention, causal (GPT-2, Llama), causal within a sliding window
// (Mistral, Gemma 3's local layers), or bidirectional over a row's first kv_len keys (BERT), with
// optional dropout of the probabilities. A windowed row's softmax covers its window's keys; the
// blocks still multiply keys from 0 (their scores past the window are overwritten with zeros),
// so a window shorter than T costs what full causal attention does. The matrix products run in
// blocks of query rows; causal, the masked upper triangle is mostly skipped: rows [r0, r1) only
// multiply keys [0, r1); bidirectional, every row multiplies keys [0, kv_len). The fp32 products
// run in the fp32 sgemm (kernels/sgemm.h: OpenBLAS or oneDNN); the bf16 ones (train.precision:
// bf16) run the same blocks in Bf16Gemm (the active bf16 kernel: AMX, VDPBF16PS, oneDNN, ...),
// with the softmax and its backward in fp32 between them.
//
// Dropout stores no mask: forward and backward both ask DropoutKeep for each element. Forward
// multiplies the dropped probabilities (fp32: through a stack buffer, as `att` must keep the
// undropped ones; bf16: in the bf16 copy it makes anyway); backward first forms the dropped
// probabilities in dS's scratch for dv = Pd^T dy, then scales dP by the mask before the softmax's
// backward, which runs on the undropped P.
//
// Unpadded rows (AttentionOptions::row_start, an encoder classifier's): row b's kv_len[b] real
// positions alone, packed after row b-1's, with (kv_len[b], kv_len[b]) probability blocks; the
// dropout indices stay the padded layout's, so the real positions get the padded pass's values.
//
// Forward: one (batch row, query head) pair per task. Backward: one (batch row, key/value head)
// pair per task, which runs the NH/NKV query heads sharing that key/value head in order: the
// first writes dk and dv, the others add, so no two tasks write the same element and the sums'
// order is fixed. With NKV = NH both are GPT-2's one task per head, in the same order as before
// grouped-query attention existed (the same products on the same operands: the same bits).
#include <cblas.h>

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "kernels/bf16.h"
#include "kernels/kernels.h"
#include "kernels/sgemm.h"
#include "kernels/vmath.h"

namespace cputrain::kernels {
namespace {

constexpr int kRowBlock = 64;
// The bf16 products' row block is Bf16RowBlock(): a multiple of the active kernel's micro-tile
// rows (VDPBF16PS 12, AMX 32), so that no tile runs mostly empty.

// p[0..t] = softmax(scale * p[0..t]); p[t+1..T) = 0. (scale = 1 multiplies exactly.)
void CausalSoftmaxRow(float* p, int t, int T, float scale = 1.f) {
  const std::size_t n = static_cast<std::size_t>(t) + 1;
  __m256 vmax = _mm256_set1_ps(-INFINITY);
  std::size_t j = 0;
  for (; j + 8 <= n; j += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(p + j));
  if (j < n) vmax = _mm256_max_ps(vmax, LoadPartial(p + j, n - j, -INFINITY));
  const __m256 m = _mm256_set1_ps(HMax8(vmax)), vs = _mm256_set1_ps(scale);
  __m256 acc = _mm256_setzero_ps();
  for (j = 0; j + 8 <= n; j += 8) {
    __m256 e = Exp8(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(p + j), m), vs));
    _mm256_storeu_ps(p + j, e);
    acc = _mm256_add_ps(acc, e);
  }
  if (j < n) {
    // padded lanes: exp(-inf - m) clamps to exp(-88.4) = 0
    __m256 e = Exp8(_mm256_mul_ps(_mm256_sub_ps(LoadPartial(p + j, n - j, -INFINITY), m), vs));
    StorePartial(p + j, n - j, e);
    acc = _mm256_add_ps(acc, e);
  }
  const float inv = 1.0f / HSum8(acc);
  for (j = 0; j < n; ++j) p[j] *= inv;
  std::fill(p + n, p + T, 0.f);
}

// p[first..last] = softmax(scale * p[first..last]); the rest of [0, T) = 0. first = 0 is
// CausalSoftmaxRow itself.
void SoftmaxRow(float* p, int first, int last, int T, float scale) {
  CausalSoftmaxRow(p + first, last - first, T - first, scale);
  std::fill(p, p + first, 0.f);
}

// Row t of the softmax's backward: d[0..t] = p * (d - rowsum(p * d)) * scale, d holding dP on
// entry and dS on return; d(t, end) = 0.
void SoftmaxBackwardRow(float* d, const float* p, int t, int end, float scale) {
  const float dot = Dot(p, d, static_cast<std::size_t>(t) + 1);
  for (int j = 0; j <= t; ++j) d[j] = p[j] * (d[j] - dot) * scale;
  std::fill(d + t + 1, d + end, 0.f);
}
// The same over [first, last] (a window's keys), zeros elsewhere in [0, end).
void SoftmaxBackwardRow(float* d, const float* p, int first, int last, int end, float scale) {
  SoftmaxBackwardRow(d + first, p + first, last - first, end - first, scale);
  std::fill(d, d + first, 0.f);
}

// The number of key/value heads: NKV, or NH for 0.
int KvHeads(int NH, int NKV) {
  if (NKV == 0) return NH;
  CPUTRAIN_CHECK(NKV > 0 && NH % NKV == 0, "attention: NKV must divide NH");
  return NKV;
}
// Where the heads are. qkv (B,T,R), R = (NH + 2*NKV)*hs: query head h of batch row b starts at
// b*T*R + h*hs, key head g at b*T*R + (NH + g)*hs, value head g at b*T*R + (NH + NKV + g)*hs;
// head h of a (B,T,C) buffer (out, dout) at b*T*C + h*hs. Every head's rows are R (or C) apart.
// Unpadded rows (AttentionOptions::row_start): row b's positions start at row_start[b] instead
// of b*T, it has kv_len[b] of them, and its att blocks are (kv_len[b], kv_len[b]).
struct Heads {
  int B, T, C, NH, NKV, hs, R;
  const int* start;  // null: padded
  const int* len;
  Heads(int B_, int T_, int C_, int NH_, int NKV_, const AttentionOptions& opt)
      : B(B_),
        T(T_),
        C(C_),
        NH(NH_),
        NKV(KvHeads(NH_, NKV_)),
        hs(C_ / NH_),
        R((NH + 2 * NKV) * hs),
        start(opt.row_start),
        len(opt.kv_len) {
    CPUTRAIN_CHECK(start == nullptr || (len != nullptr && start[0] == 0),
                   "attention: unpadded rows (row_start) need kv_len, from 0");
    for (int b = 0; start != nullptr && b < B; ++b)
      CPUTRAIN_CHECK(start[b + 1] - start[b] == len[b], "attention: row_start must step by kv_len");
  }
  int Group() const { return NH / NKV; }  // query heads per key/value head
  // Row b's first position, its number of query positions (its att blocks' row stride too), and
  // every row's positions.
  std::size_t Pos(std::size_t b) const { return start ? start[b] : b * T; }
  int Rows(std::size_t b) const { return start ? len[b] : T; }
  std::size_t Positions() const { return Pos(B); }
  std::size_t Row(std::size_t b) const { return Pos(b) * R; }
  std::size_t Out(std::size_t b, int h) const {
    return Pos(b) * C + static_cast<std::size_t>(h) * hs;
  }
  // Where (b, h)'s att block starts.
  std::size_t Att(std::size_t b, int h) const {
    if (!start) return (b * NH + h) * T * T;
    std::size_t before = 0;
    for (std::size_t i = 0; i < b; ++i) before += static_cast<std::size_t>(len[i]) * len[i];
    return before * NH + static_cast<std::size_t>(h) * len[b] * len[b];
  }
};
template <class E>
struct Qkv {
  E *q, *k, *v;
};
// Backward task b*NKV + g: f(b, h, first) for the query heads h sharing key/value head g, in
// order; `first` writes dk and dv, the others add to them.
template <class F>
void ForGroupHeads(const Heads& H, std::size_t task, F&& f) {
  const std::size_t b = task / H.NKV;
  const int h0 = static_cast<int>(task % H.NKV) * H.Group();
  for (int h = h0; h < h0 + H.Group(); ++h) f(b, h, h == h0);
}
// Query head h of batch row b and the key/value head it attends with.
template <class E>
Qkv<E> QkvOf(E* base, const Heads& H, std::size_t b, int h) {
  E* row = base + H.Row(b);
  const std::size_t g = static_cast<std::size_t>(h / H.Group()), hs = H.hs;
  return {row + h * hs, row + (H.NH + g) * hs, row + (H.NH + H.NKV + g) * hs};
}

// Which keys a query row attends: causal, row t keys [0, t] (in a window of W: (t - W, t]; in a
// packed row, from its document's first position);
// bidirectional, keys [0, kv_len[b]).
struct Mask {
  const int* kv_len;
  const int* doc_start;
  int T, window;
  Mask(const AttentionOptions& opt, int B, int T_)
      : kv_len(opt.kv_len), doc_start(opt.doc_start), T(T_), window(opt.window) {
    CPUTRAIN_CHECK(doc_start == nullptr || kv_len == nullptr,
                   "attention: documents (doc_start) are causal attention's");
    for (int b = 0; kv_len != nullptr && b < B; ++b)
      CPUTRAIN_CHECK(kv_len[b] >= 1 && kv_len[b] <= T, "attention: kv_len must be in [1, T]");
    CPUTRAIN_CHECK(window >= 0 && (window == 0 || kv_len == nullptr),
                   "attention: a window is causal attention's (window >= 0, no kv_len)");
  }
  bool causal() const { return kv_len == nullptr; }
  // The first and the last key of row t: the softmax covers [First, Last], zeros elsewhere.
  // Packed rows: not before the row's document's first position either.
  int First(std::size_t b, int t) const {
    const int w = window > 0 && t >= window ? t - window + 1 : 0;
    return doc_start ? std::max(w, doc_start[b * T + static_cast<std::size_t>(t)]) : w;
  }
  int Last(std::size_t b, int t) const { return causal() ? t : kv_len[b] - 1; }
  // The keys a block of rows ending at r1 multiplies: [0, Keys).
  int Keys(std::size_t b, int r1) const { return causal() ? r1 : kv_len[b]; }
};

// The scores' scale: the option's, else 1/sqrt(hs).
float ScoreScale(const AttentionOptions& opt, int hs) {
  CPUTRAIN_CHECK(opt.scale >= 0.f, "attention: the scale must be positive (0: 1/sqrt(hs))");
  return opt.scale > 0.f ? opt.scale : 1.0f / std::sqrt(static_cast<float>(hs));
}

// Attention dropout: the mask of element (b, h, t, s) at index ((b*NH + h)*T + t)*T + s.
struct AttentionDropout {
  DropoutMask mask;
  bool on;
  uint64_t offset;
  int NH, T;
  AttentionDropout(const AttentionOptions& opt, int NH_, int T_)
      : mask(opt.dropout_seed, opt.dropout),
        on(opt.dropout > 0.f),
        offset(opt.dropout_offset),
        NH(NH_),
        T(T_) {
    CPUTRAIN_CHECK(opt.dropout >= 0.f && opt.dropout < 1.f, "attention: dropout must be in [0, 1)");
  }
  // The index of element (b, h, t, 0).
  uint64_t Row(std::size_t b, int h, int t) const {
    return offset + ((static_cast<uint64_t>(b) * NH + h) * T + t) * T;
  }
  // dst[0, n) = p[0, n) dropped and scaled, row `row`'s mask (dst may be p).
  void Apply(float* dst, const float* p, int n, uint64_t row) const {
    for (int s = 0; s < n; ++s) dst[s] = mask.Keep(row + s) ? p[s] * mask.scale : 0.f;
  }
};

// y[0:rows] = drop(A[0:rows, 0:n]) @ v[0:n] (A's row stride T; the rows are t0..), through a
// stack buffer, as `att` keeps the undropped A. 16K floats (64 KiB of an 8 MiB thread stack) hold
// 42 rows at BERT's T = 384; longer rows go in column chunks added up (sgemm beta = 1).
void DroppedProduct(const AttentionDropout& drop, std::size_t b, int h, int t0, int rows, int n,
                    const float* A, int T, const float* v, int R, int hs, float* y, int C) {
  constexpr int kBuf = 16384;
  alignas(64) float buf[kBuf];
  const int rows_per = std::max(1, kBuf / n), cols_per = std::min(n, kBuf);
  for (int i0 = 0; i0 < rows; i0 += rows_per) {
    const int i1 = std::min(rows, i0 + rows_per);
    for (int c0 = 0; c0 < n; c0 += cols_per) {
      const int w = std::min(n, c0 + cols_per) - c0;
      for (int i = i0; i < i1; ++i)
        drop.Apply(buf + static_cast<std::size_t>(i - i0) * w,
                   A + static_cast<std::size_t>(i) * T + c0, w, drop.Row(b, h, t0 + i) + c0);
      internal::Sgemm(GemmClass::kAttnFwd, false, false, i1 - i0, hs, w, 1.f, buf, w,
                      v + static_cast<std::size_t>(c0) * R, R, c0 == 0 ? 0.f : 1.f,
                      y + static_cast<std::size_t>(i0) * C, C);
    }
  }
}

// dst[j0:j1] (+)= M[i0:T, j0:j1]^T @ x[i0:T] (M's row stride T): fp32 in the fp32 sgemm, bf16 in
// Bf16Gemm.
void TransposedGemm(int j0, int j1, int i0, int T, int hs, const float* M, const float* x, int ldx,
                    float* dst, int R, bool add) {
  const std::size_t o = static_cast<std::size_t>(j0), i = static_cast<std::size_t>(i0);
  internal::Sgemm(GemmClass::kAttnBwd, true, false, j1 - j0, hs, T - i0, 1.f, M + i * T + o, T,
                  x + i * ldx, ldx, add ? 1.f : 0.f, dst + o * R, R);
}
void TransposedGemm(int j0, int j1, int i0, int T, int hs, const uint16_t* M, const uint16_t* x,
                    int ldx, float* dst, int R, bool add) {
  const std::size_t o = static_cast<std::size_t>(j0), i = static_cast<std::size_t>(i0);
  Bf16Gemm(GemmClass::kAttnBwd, j1 - j0, hs, T - i0, M + i * T + o, true, T, x + i * ldx, false,
           ldx, dst + o * R, R, add);
}

// dst[0:T] (+)= M[0:T, 0:T]^T @ x[0:T] (dk from dS and q, dv from P and dy; dst rows R apart, x
// rows ldx apart), M a head's (T,T) whose rows are zero past the mask. Causal: in column blocks
// that skip the zero upper triangle (block [j0, j1) needs rows [j0, T) alone). Bidirectional:
// columns [0, L) in one product, and dst's rows [L, T) (masked keys) written zero or left alone.
template <class E>
void TransposedProduct(const Mask& mask, std::size_t b, int T, int hs, bool first, const E* M,
                       const E* x, int ldx, float* dst, int R, int block) {
  if (mask.causal()) {
    for (int j0 = 0; j0 < T; j0 += block)
      TransposedGemm(j0, std::min(T, j0 + block), j0, T, hs, M, x, ldx, dst, R, !first);
    return;
  }
  const int L = mask.kv_len[b];
  TransposedGemm(0, L, 0, T, hs, M, x, ldx, dst, R, !first);
  for (int j = L; first && j < T; ++j) std::fill_n(dst + static_cast<std::size_t>(j) * R, hs, 0.f);
}

}  // namespace

void AttentionForward(WorkerPool& pool, float* out, float* att, const float* qkv, int B, int T,
                      int C, int NH, int NKV, const AttentionOptions& opt) {
  const Heads H(B, T, C, NH, NKV, opt);
  const Mask mask(opt, B, T);
  const AttentionDropout drop(opt, NH, T);
  const int hs = H.hs, R = H.R;
  const float scale = ScoreScale(opt, hs);
  pool.ParallelFor(static_cast<std::size_t>(B) * NH, [&](std::size_t t0, std::size_t t1, int) {
    for (std::size_t task = t0; task < t1; ++task) {  // task == b*NH + h
      const std::size_t b = task / NH;
      const int h = static_cast<int>(task % NH), Tb = H.Rows(b);
      const auto [q, k, v] = QkvOf(qkv, H, b, h);
      float* A = att + H.Att(b, h);
      float* y = out + H.Out(b, h);
      for (int r0 = 0; r0 < Tb; r0 += kRowBlock) {
        const int r1 = std::min(Tb, r0 + kRowBlock), n = mask.Keys(b, r1);
        // A[r0:r1, 0:n] = scale * q[r0:r1] @ k[0:n]^T
        internal::Sgemm(GemmClass::kAttnFwd, false, true, r1 - r0, n, hs, scale,
                        q + static_cast<std::size_t>(r0) * R, R, k, R, 0.f,
                        A + static_cast<std::size_t>(r0) * Tb, Tb);
        for (int t = r0; t < r1; ++t)
          SoftmaxRow(A + static_cast<std::size_t>(t) * Tb, mask.First(b, t), mask.Last(b, t), Tb,
                     1.f);
        // y[r0:r1] = drop(A[r0:r1, 0:n]) @ v[0:n]
        if (drop.on) {
          DroppedProduct(drop, b, h, r0, r1 - r0, n, A + static_cast<std::size_t>(r0) * Tb, Tb, v,
                         R, hs, y + static_cast<std::size_t>(r0) * C, C);
          continue;
        }
        internal::Sgemm(GemmClass::kAttnFwd, false, false, r1 - r0, hs, n, 1.f,
                        A + static_cast<std::size_t>(r0) * Tb, Tb, v, R, 0.f,
                        y + static_cast<std::size_t>(r0) * C, C);
      }
    }
  });
}

void AttentionBackward(WorkerPool& pool, float* dqkv, float* scratch, const float* dout,
                       const float* qkv, const float* att, int B, int T, int C, int NH, int NKV,
                       const AttentionOptions& opt) {
  const Heads H(B, T, C, NH, NKV, opt);
  const Mask mask(opt, B, T);
  const AttentionDropout drop(opt, NH, T);
  const int hs = H.hs, R = H.R;
  const float scale = ScoreScale(opt, hs);
  const std::size_t tasks = static_cast<std::size_t>(B) * H.NKV;
  pool.ParallelFor(tasks, [&](std::size_t t0, std::size_t t1, int tid) {
    float* dS = scratch + static_cast<std::size_t>(tid) * T * T;
    for (std::size_t task = t0; task < t1; ++task) {
      ForGroupHeads(H, task, [&](std::size_t b, int h, bool first) {
        const int Tb = H.Rows(b);  // dS's row stride too
        const auto [q, k, v] = QkvOf(qkv, H, b, h);
        const auto [dq, dk, dv] = QkvOf(dqkv, H, b, h);
        const float* P = att + H.Att(b, h);
        const float* dy = dout + H.Out(b, h);
        // dv (+)= Pd^T @ dy, Pd = P dropped (zeros past the mask, as P has), or P itself.
        const float* Pd = P;
        if (drop.on) {
          for (int t = 0; t < Tb; ++t) {
            float* d = dS + static_cast<std::size_t>(t) * Tb;
            const int n = mask.Last(b, t) + 1;
            drop.Apply(d, P + static_cast<std::size_t>(t) * Tb, n, drop.Row(b, h, t));
            std::fill(d + n, d + Tb, 0.f);
          }
          Pd = dS;
        }
        TransposedProduct(mask, b, Tb, hs, first, Pd, dy, C, dv, R, kRowBlock);
        for (int r0 = 0; r0 < Tb; r0 += kRowBlock) {
          const int r1 = std::min(Tb, r0 + kRowBlock), n = mask.Keys(b, r1);
          // dP[r0:r1, 0:n] = dy[r0:r1] @ v[0:n]^T, kept in dS
          internal::Sgemm(GemmClass::kAttnBwd, false, true, r1 - r0, n, hs, 1.f,
                          dy + static_cast<std::size_t>(r0) * C, C, v, R, 0.f,
                          dS + static_cast<std::size_t>(r0) * Tb, Tb);
          // dS on [0, Tb): exact zeros past the mask because the column-block products below read
          // the upper triangle of diagonal blocks. With dropout, dP is the gradient of the
          // dropped P: the mask and 1/(1-p) carry it back to P first.
          for (int t = r0; t < r1; ++t) {
            float* d = dS + static_cast<std::size_t>(t) * Tb;
            if (drop.on) drop.Apply(d, d, mask.Last(b, t) + 1, drop.Row(b, h, t));
            SoftmaxBackwardRow(d, P + static_cast<std::size_t>(t) * Tb, mask.First(b, t),
                               mask.Last(b, t), Tb, scale);
          }
          // dq[r0:r1] = dS[r0:r1, 0:n] @ k[0:n]
          internal::Sgemm(GemmClass::kAttnBwd, false, false, r1 - r0, hs, n, 1.f,
                          dS + static_cast<std::size_t>(r0) * Tb, Tb, k, R, 0.f,
                          dq + static_cast<std::size_t>(r0) * R, R);
        }
        // dk (+)= dS^T @ q
        TransposedProduct(mask, b, Tb, hs, first, dS, q, R, dk, R, kRowBlock);
      });
    }
  });
}

void AttentionDecode(WorkerPool& pool, float* out, float* scratch, const float* q,
                     const float* k_cache, const float* v_cache, int n, int NH, int NKV, int hs,
                     int ld, float scale) {
  const std::size_t group = static_cast<std::size_t>(NH / KvHeads(NH, NKV));
  if (!(scale > 0.f)) scale = 1.0f / std::sqrt(static_cast<float>(hs));
  pool.ParallelFor(static_cast<std::size_t>(NH), [&](std::size_t t0, std::size_t t1, int tid) {
    float* a = scratch + static_cast<std::size_t>(tid) * n;
    for (std::size_t h = t0; h < t1; ++h) {
      const std::size_t g = h / group;
      // a[0:n] = scale * k[0:n] @ q_h; softmax; out_h = a[0:n] @ v[0:n]
      cblas_sgemv(CblasRowMajor, CblasNoTrans, n, hs, scale, k_cache + g * hs, ld, q + h * hs, 1,
                  0.f, a, 1);
      CausalSoftmaxRow(a, n - 1, n);
      cblas_sgemv(CblasRowMajor, CblasTrans, n, hs, 1.f, v_cache + g * hs, ld, a, 1, 0.f,
                  out + h * hs, 1);
    }
  });
}

// dst[0, n) = bf16 of p[0, n), dropped (row `row`'s mask) when dropout is on.
void ProbabilitiesToBf16(uint16_t* dst, const float* p, int n, const AttentionDropout& drop,
                         uint64_t row) {
  if (!drop.on) {
    ConvertRowToBf16(dst, p, n);
    return;
  }
  for (int s = 0; s < n; ++s)
    dst[s] = FloatToBf16(drop.mask.Keep(row + s) ? p[s] * drop.mask.scale : 0.f);
}

void AttentionForwardBf16(WorkerPool& pool, float* out, float* att, const float* qkv,
                          uint16_t* qkv_bf16, uint16_t* scratch_bf16, int B, int T, int C, int NH,
                          int NKV, const AttentionOptions& opt) {
  const Heads H(B, T, C, NH, NKV, opt);
  const Mask mask(opt, B, T);
  const AttentionDropout drop(opt, NH, T);
  const int hs = H.hs, R = H.R;
  const float scale = ScoreScale(opt, hs);
  const int block = Bf16RowBlock(GemmClass::kAttnFwd);
  ConvertToBf16(pool, qkv_bf16, qkv, H.Positions() * R);
  pool.ParallelFor(static_cast<std::size_t>(B) * NH, [&](std::size_t t0, std::size_t t1, int tid) {
    uint16_t* Pb = scratch_bf16 + static_cast<std::size_t>(tid) * AttentionScratchBf16(1, T);
    for (std::size_t task = t0; task < t1; ++task) {  // task == b*NH + h
      const std::size_t b = task / NH;
      const int h = static_cast<int>(task % NH), Tb = H.Rows(b);
      const auto [q, k, v] = QkvOf<const uint16_t>(qkv_bf16, H, b, h);
      float* A = att + H.Att(b, h);
      float* y = out + H.Out(b, h);
      for (int r0 = 0; r0 < Tb; r0 += block) {
        const int r1 = std::min(Tb, r0 + block), n = mask.Keys(b, r1);
        const std::size_t o = static_cast<std::size_t>(r0);
        // A[r0:r1, 0:n] = q[r0:r1] @ k[0:n]^T (scaled inside the softmax)
        Bf16Gemm(GemmClass::kAttnFwd, r1 - r0, n, hs, q + o * R, false, R, k, true, R, A + o * Tb,
                 Tb);
        for (int t = r0; t < r1; ++t) {
          float* p = A + static_cast<std::size_t>(t) * Tb;
          SoftmaxRow(p, mask.First(b, t), mask.Last(b, t), Tb, scale);
          ProbabilitiesToBf16(Pb + static_cast<std::size_t>(t) * Tb, p, n, drop, drop.Row(b, h, t));
        }
        // y[r0:r1] = drop(P[r0:r1, 0:n]) @ v[0:n]
        Bf16Gemm(GemmClass::kAttnFwd, r1 - r0, hs, n, Pb + o * Tb, false, Tb, v, false, R,
                 y + o * C, C);
      }
    }
  });
}

void AttentionBackwardBf16(WorkerPool& pool, float* dqkv, float* scratch, uint16_t* scratch_bf16,
                           uint16_t* qkv_bf16, uint16_t* dout_bf16, const float* dout,
                           const float* qkv, const float* att, int B, int T, int C, int NH, int NKV,
                           const AttentionOptions& opt) {
  const Heads H(B, T, C, NH, NKV, opt);
  const Mask mask(opt, B, T);
  const AttentionDropout drop(opt, NH, T);
  const int hs = H.hs, R = H.R;
  const float scale = ScoreScale(opt, hs);
  const int block = Bf16RowBlock(GemmClass::kAttnBwd);
  ConvertToBf16(pool, qkv_bf16, qkv, H.Positions() * R);
  ConvertToBf16(pool, dout_bf16, dout, H.Positions() * C);
  const std::size_t tasks = static_cast<std::size_t>(B) * H.NKV;
  pool.ParallelFor(tasks, [&](std::size_t t0, std::size_t t1, int tid) {
    float* dP = scratch + static_cast<std::size_t>(tid) * T * T;
    uint16_t* dSb = scratch_bf16 + static_cast<std::size_t>(tid) * AttentionScratchBf16(1, T);
    uint16_t* Pb = dSb + static_cast<std::size_t>(T) * T;
    for (std::size_t task = t0; task < t1; ++task) {
      ForGroupHeads(H, task, [&](std::size_t b, int h, bool first) {
        const int Tb = H.Rows(b);  // the row stride of dP, dSb and Pb too
        const auto [q, k, v] = QkvOf<const uint16_t>(qkv_bf16, H, b, h);
        const auto [dq, dk, dv] = QkvOf(dqkv, H, b, h);
        const float* P = att + H.Att(b, h);
        const uint16_t* dy = dout_bf16 + H.Out(b, h);
        // Row t of dSb and Pb is written on columns [0, n), n the keys of t's block, which is
        // every column the products below read of it (zeros past the mask).
        for (int r0 = 0; r0 < Tb; r0 += block) {
          const int r1 = std::min(Tb, r0 + block), n = mask.Keys(b, r1);
          const std::size_t o = static_cast<std::size_t>(r0);
          // dP[r0:r1, 0:n] = dy[r0:r1] @ v[0:n]^T
          Bf16Gemm(GemmClass::kAttnBwd, r1 - r0, n, hs, dy + o * C, false, C, v, true, R,
                   dP + o * Tb, Tb);
          for (int t = r0; t < r1; ++t) {
            const float* p = P + static_cast<std::size_t>(t) * Tb;
            float* d = dP + static_cast<std::size_t>(t) * Tb;
            const uint64_t row = drop.Row(b, h, t);
            // the gradient of the dropped P carried back to P (see AttentionBackward)
            if (drop.on) drop.Apply(d, d, mask.Last(b, t) + 1, row);
            SoftmaxBackwardRow(d, p, mask.First(b, t), mask.Last(b, t), n, scale);
            ConvertRowToBf16(dSb + static_cast<std::size_t>(t) * Tb, d, n);
            ProbabilitiesToBf16(Pb + static_cast<std::size_t>(t) * Tb, p, n, drop, row);
          }
          // dq[r0:r1] = dS[r0:r1, 0:n] @ k[0:n]
          Bf16Gemm(GemmClass::kAttnBwd, r1 - r0, hs, n, dSb + o * Tb, false, Tb, k, false, R,
                   dq + o * R, R);
        }
        // dk (+)= dS^T @ q;  dv (+)= drop(P)^T @ dy
        TransposedProduct(mask, b, Tb, hs, first, dSb, q, R, dk, R, block);
        TransposedProduct(mask, b, Tb, hs, first, Pb, dy, C, dv, R, block);
      });
    }
  });
}

}  // namespace cputrain::kernels
