// Vectorized float math for the kernels (AVX2 + FMA, the x86-64-v3 baseline): exp, and the
// sums whose order we fix so that every result is the same run to run.
//
// Why not libm: a training step of GPT-2 124M at B*T = 512 evaluates ~26M exps (softmax over
// V = 50257) and ~19M GELUs; scalar expf/tanhf cost ~20 ns each here, i.e. ~1 s per step, more
// than the matrix products. The polynomial below (Cephes expf, degree 6 after range reduction
// to |r| <= ln2/2) is within 2 ulp of expf over the clamped range and costs ~1 ns per 8 values.
//
// Tails shorter than 8 go through the same vector code (padded), so a value gets the same bits
// whatever its position in a row.
#pragma once

#include <immintrin.h>

#include <cstddef>

namespace cputrain::kernels {

// e^r for |r| <= ln2/2 (a little more is fine): Exp8's polynomial after its range reduction,
// for callers that reduce the argument themselves (gelu_erf.cc splits x^2 in two).
inline __m256 ExpReduced8(__m256 r) {
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), r);
  return _mm256_add_ps(y, _mm256_set1_ps(1.0f));
}

// e^x for 8 lanes. Inputs are clamped to [-88.376, 88.376]: the low end gives 0 (not a
// denormal), the high end FLT_MAX-ish; softmax and GELU never need more.
inline __m256 Exp8(__m256 x) {
  const __m256 kHi = _mm256_set1_ps(88.3762626647949f);
  const __m256 kLo = _mm256_set1_ps(-88.3762626647949f);
  const __m256 kLog2e = _mm256_set1_ps(1.44269504088896341f);
  const __m256 kC1 = _mm256_set1_ps(0.693359375f);  // ln2 split in two for exact reduction
  const __m256 kC2 = _mm256_set1_ps(-2.12194440e-4f);
  x = _mm256_min_ps(_mm256_max_ps(x, kLo), kHi);
  // n = round(x * log2(e)); r = x - n*ln2
  __m256 n =
      _mm256_round_ps(_mm256_mul_ps(x, kLog2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, kC1, x);
  r = _mm256_fnmadd_ps(n, kC2, r);
  const __m256 y = ExpReduced8(r);
  // 2^n through the exponent bits; n in [-127, 128] after the clamp. n = -127 gives 0.
  __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
  e = _mm256_max_epi32(e, _mm256_setzero_si256());
  __m256 pow2n = _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
  return _mm256_mul_ps(y, pow2n);
}

// Horizontal sum of 8 lanes in a fixed order.
inline float HSum8(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  __m128 s = _mm_add_ps(lo, hi);
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float HMax8(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  __m128 m = _mm_max_ps(lo, hi);
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// Loads the first n (< 8) floats of p, the other lanes set to `fill`.
inline __m256 LoadPartial(const float* p, std::size_t n, float fill) {
  alignas(32) float tmp[8];
  for (int i = 0; i < 8; ++i) tmp[i] = static_cast<std::size_t>(i) < n ? p[i] : fill;
  return _mm256_load_ps(tmp);
}
inline void StorePartial(float* p, std::size_t n, __m256 v) {
  alignas(32) float tmp[8];
  _mm256_store_ps(tmp, v);
  for (std::size_t i = 0; i < n; ++i) p[i] = tmp[i];
}

// The 8 lanes rounded to bf16 as kernels::FloatToBf16 rounds one (nearest, ties to even; NaN to
// 0x7fc0), packed into 8 uint16 in lane order.
inline __m128i Bf16x8(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r =
      _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                         _mm256_set1_epi32(0x7f800000));
  r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7fc0), nan);
  // 32 -> 16 bits (every value < 2^16), per 128-bit half; then the two halves' low quadwords.
  const __m256i packed = _mm256_packus_epi32(r, r);
  return _mm_unpacklo_epi64(_mm256_castsi256_si128(packed), _mm256_extracti128_si256(packed, 1));
}

// sum(a[i] * b[i]) with 8 lanes, then HSum8: fixed order.
inline float Dot(const float* a, const float* b, std::size_t n) {
  __m256 acc = _mm256_setzero_ps();
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8)
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
  if (i < n)
    acc = _mm256_fmadd_ps(LoadPartial(a + i, n - i, 0.f), LoadPartial(b + i, n - i, 0.f), acc);
  return HSum8(acc);
}

inline float Sum(const float* a, std::size_t n) {
  __m256 acc = _mm256_setzero_ps();
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_add_ps(acc, _mm256_loadu_ps(a + i));
  if (i < n) acc = _mm256_add_ps(acc, LoadPartial(a + i, n - i, 0.f));
  return HSum8(acc);
}

}  // namespace cputrain::kernels
