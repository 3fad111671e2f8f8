#include "comm/kernels.h"

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "common/error.h"

namespace cputrain::comm {
namespace {

// Sums exactly K sources (K known at compile time so the source loop unrolls and the K pointers
// live in registers). 32 floats (four AVX2 registers, two cache lines of every source) per step:
// enough independent adds to hide their latency, few enough streams for the prefetchers.
// kStream: non-temporal stores for the 32-byte-aligned body (scalar head up to the alignment),
// then a store fence (see CopyStreaming).
template <int K, bool kStream>
void SumFixed(float* dst, const float* const* srcs, std::size_t offset, std::size_t n) {
  const float* s[K];
  for (int k = 0; k < K; ++k) s[k] = srcs[k] + offset;
  auto scalar = [&](std::size_t i) {
    float a = s[0][i];
    for (int k = 1; k < K; ++k) a += s[k][i];
    dst[i] = a;
  };
  auto store = [&](float* p, __m256 v) {
    if constexpr (kStream) {
      _mm256_stream_ps(p, v);
    } else {
      _mm256_storeu_ps(p, v);
    }
  };
  std::size_t i = 0;
  if constexpr (kStream) {
    for (; i < n && (reinterpret_cast<std::uintptr_t>(dst + i) & 31) != 0; ++i) scalar(i);
  }
  for (; i + 32 <= n; i += 32) {
    __m256 a0 = _mm256_loadu_ps(s[0] + i);
    __m256 a1 = _mm256_loadu_ps(s[0] + i + 8);
    __m256 a2 = _mm256_loadu_ps(s[0] + i + 16);
    __m256 a3 = _mm256_loadu_ps(s[0] + i + 24);
    for (int k = 1; k < K; ++k) {
      a0 = _mm256_add_ps(a0, _mm256_loadu_ps(s[k] + i));
      a1 = _mm256_add_ps(a1, _mm256_loadu_ps(s[k] + i + 8));
      a2 = _mm256_add_ps(a2, _mm256_loadu_ps(s[k] + i + 16));
      a3 = _mm256_add_ps(a3, _mm256_loadu_ps(s[k] + i + 24));
    }
    store(dst + i, a0);
    store(dst + i + 8, a1);
    store(dst + i + 16, a2);
    store(dst + i + 24, a3);
  }
  for (; i + 8 <= n; i += 8) {
    __m256 a = _mm256_loadu_ps(s[0] + i);
    for (int k = 1; k < K; ++k) a = _mm256_add_ps(a, _mm256_loadu_ps(s[k] + i));
    store(dst + i, a);
  }
  for (; i < n; ++i) scalar(i);
  if constexpr (kStream) _mm_sfence();
}

// dst[i] += src[i]. Used only for sources 9.. of a wide sum, on an L1-resident block.
void AddInto(float* dst, const float* src, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(dst + i, _mm256_add_ps(_mm256_loadu_ps(dst + i), _mm256_loadu_ps(src + i)));
  }
  for (; i < n; ++i) dst[i] += src[i];
}

using SumFn = void (*)(float*, const float* const*, std::size_t, std::size_t);
template <bool kStream>
constexpr SumFn kSumFixed[] = {nullptr,
                               SumFixed<1, kStream>,
                               SumFixed<2, kStream>,
                               SumFixed<3, kStream>,
                               SumFixed<4, kStream>,
                               SumFixed<5, kStream>,
                               SumFixed<6, kStream>,
                               SumFixed<7, kStream>,
                               SumFixed<8, kStream>};
constexpr int kMaxFixed = 8;

}  // namespace

void SumInto(float* dst, const float* const* srcs, int nsrc, std::size_t n) {
  SumIntoAt(dst, srcs, nsrc, 0, n);
}

void SumIntoAt(float* dst, const float* const* bases, int nsrc, std::size_t offset, std::size_t n,
               StoreHint hint) {
  CPUTRAIN_CHECK(nsrc >= 1, "SumInto needs at least one source");
  if (n == 0) return;
  if (nsrc <= kMaxFixed) {
    (hint == StoreHint::kStreaming ? kSumFixed<true> : kSumFixed<false>)[nsrc](dst, bases, offset,
                                                                               n);
    return;
  }
  // More than 8 sources: a 1 KiB block at a time, first sources 0..7 in one pass, then each
  // further source added in order. The block stays in L1, so the extra passes cost no memory
  // traffic, and the left-to-right order of the contract holds.
  constexpr std::size_t kBlock = 256;
  alignas(32) float acc[kBlock];
  const float* ptrs[kMaxFixed];
  for (std::size_t b = 0; b < n; b += kBlock) {
    const std::size_t len = n - b < kBlock ? n - b : kBlock;
    for (int k = 0; k < kMaxFixed; ++k) ptrs[k] = bases[k] + offset + b;
    SumFixed<kMaxFixed, false>(acc, ptrs, 0, len);
    for (int k = kMaxFixed; k < nsrc; ++k) AddInto(acc, bases[k] + offset + b, len);
    if (hint == StoreHint::kStreaming) {
      CopyStreaming(dst + b, acc, len);
    } else {
      std::memcpy(dst + b, acc, len * sizeof(float));
    }
  }
}

void Copy(float* dst, const float* src, std::size_t n) {
  if (dst == src || n == 0) return;
  std::memcpy(dst, src, n * sizeof(float));
}

void CopyStreaming(float* dst, const float* src, std::size_t n) {
  if (dst == src || n == 0) return;
  std::size_t i = 0;
  // Scalar head up to a 32-byte boundary of dst (float alignment makes this at most 7).
  while (i < n && (reinterpret_cast<std::uintptr_t>(dst + i) & 31) != 0) {
    dst[i] = src[i];
    ++i;
  }
  for (; i + 32 <= n; i += 32) {
    __m256 a0 = _mm256_loadu_ps(src + i);
    __m256 a1 = _mm256_loadu_ps(src + i + 8);
    __m256 a2 = _mm256_loadu_ps(src + i + 16);
    __m256 a3 = _mm256_loadu_ps(src + i + 24);
    _mm256_stream_ps(dst + i, a0);
    _mm256_stream_ps(dst + i + 8, a1);
    _mm256_stream_ps(dst + i + 16, a2);
    _mm256_stream_ps(dst + i + 24, a3);
  }
  for (; i < n; ++i) dst[i] = src[i];
  // Non-temporal stores are weakly ordered: fence them so a later release store (the
  // collective's progress counter) cannot become visible before them.
  _mm_sfence();
}

}  // namespace cputrain::comm
