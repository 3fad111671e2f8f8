// Rotary position embeddings (RoPE) in Hugging Face's layout (rotate_half: the pair of element i
// is element i + hs/2, not i + 1), on the query and key heads of the fused qkv activation.
//
// The tables follow transformers' fp32 arithmetic step by step (transformers.modeling_rope_utils:
// _compute_default_rope_parameters and _compute_llama3_parameters; LlamaRotaryEmbedding.forward
// for the angles), so that a converted Llama checkpoint sees the angles it was trained with.
// Where torch evaluates a Python number against an fp32 tensor, the number is rounded to fp32
// first; `a / tensor` is tensor.reciprocal() * a (torch.Tensor.__rtruediv__). This file is
// compiled with -ffp-contract=off (src/kernels/CMakeLists.txt), so that every product and sum
// here rounds on its own as torch's do, in the tables and in the rotation alike.
#include <cmath>

#include "kernels/kernels.h"
#include "kernels/vmath.h"

namespace cputrain::kernels {
namespace {

// inv_freq rescaled as transformers' _compute_llama3_parameters: wavelengths 2 pi / inv_freq
// above original_max_position / low_freq_factor are stretched by `factor`, those below
// original_max_position / high_freq_factor kept, those between interpolated smoothly.
float Llama3InvFreq(float inv_freq, const RopeScaling& s) {
  const float low_wavelen =
      static_cast<float>(static_cast<double>(s.original_max_position) / s.low_freq_factor);
  const float high_wavelen =
      static_cast<float>(static_cast<double>(s.original_max_position) / s.high_freq_factor);
  const float wavelen = (1.0f / inv_freq) * static_cast<float>(2 * M_PI);
  const float kept = wavelen > low_wavelen ? inv_freq / s.factor : inv_freq;
  if (wavelen < high_wavelen || wavelen > low_wavelen) return kept;
  const float smooth =
      ((1.0f / wavelen) * static_cast<float>(s.original_max_position) - s.low_freq_factor) /
      static_cast<float>(static_cast<double>(s.high_freq_factor) -
                         static_cast<double>(s.low_freq_factor));
  return (1.0f - smooth) * kept / s.factor + smooth * kept;
}

// x (2 halves of `half`) turned by the angles whose cos and sin are c, s: x1 c - x2 s, x2 c + x1 s,
// each product rounded (as torch's x * cos + rotate_half(x) * sin). `transpose` negates the sine:
// the inverse (transposed) rotation, exactly (negation rounds nothing).
void Rotate(float* x, const float* c, const float* s, int half, bool transpose) {
  const __m256 flip = _mm256_set1_ps(transpose ? -0.f : 0.f);
  float* x2 = x + half;
  auto turn = [&](__m256 a, __m256 b, __m256 vc, __m256 vs, __m256* o1, __m256* o2) {
    vs = _mm256_xor_ps(vs, flip);
    *o1 = _mm256_sub_ps(_mm256_mul_ps(a, vc), _mm256_mul_ps(b, vs));
    *o2 = _mm256_add_ps(_mm256_mul_ps(b, vc), _mm256_mul_ps(a, vs));
  };
  int i = 0;
  __m256 o1, o2;
  for (; i + 8 <= half; i += 8) {
    turn(_mm256_loadu_ps(x + i), _mm256_loadu_ps(x2 + i), _mm256_loadu_ps(c + i),
         _mm256_loadu_ps(s + i), &o1, &o2);
    _mm256_storeu_ps(x + i, o1);
    _mm256_storeu_ps(x2 + i, o2);
  }
  if (i < half) {
    const std::size_t n = static_cast<std::size_t>(half - i);
    turn(LoadPartial(x + i, n, 0.f), LoadPartial(x2 + i, n, 0.f), LoadPartial(c + i, n, 0.f),
         LoadPartial(s + i, n, 0.f), &o1, &o2);
    StorePartial(x + i, n, o1);
    StorePartial(x2 + i, n, o2);
  }
}

// Every row of qkv (B,T,(NH+2*NKV)*hs): its NH + NKV query and key heads, at position pos0 + t.
void RotateRows(WorkerPool& pool, float* qkv, const float* cos, const float* sin, int B, int T,
                int NH, int NKV, int hs, int pos0, bool transpose) {
  const int half = hs / 2;
  const std::size_t R = static_cast<std::size_t>(NH + 2 * NKV) * hs;
  pool.ParallelFor(static_cast<std::size_t>(B) * T, [&](std::size_t r0, std::size_t r1, int) {
    for (std::size_t r = r0; r < r1; ++r) {
      const std::size_t at = (pos0 + r % T) * half;
      for (int h = 0; h < NH + NKV; ++h)
        Rotate(qkv + r * R + static_cast<std::size_t>(h) * hs, cos + at, sin + at, half, transpose);
    }
  });
}

}  // namespace

void RopeTables(float* cos, float* sin, int maxT, int hs, float theta, const RopeScaling& scaling) {
  const int half = hs / 2;
  for (int i = 0; i < half; ++i) {
    // inv_freq = 1 / theta ** (arange(0, hs, 2).float() / hs): an fp32 exponent, an fp32 power.
    const float e = static_cast<float>(2 * i) / static_cast<float>(hs);
    float inv_freq = 1.0f / static_cast<float>(std::pow(static_cast<double>(theta), e));
    if (scaling.kind == RopeScaling::kLlama3) inv_freq = Llama3InvFreq(inv_freq, scaling);
    // _compute_linear_scaling_rope_parameters: inv_freq /= factor, in fp32.
    if (scaling.kind == RopeScaling::kLinear) inv_freq = inv_freq / scaling.factor;
    for (int p = 0; p < maxT; ++p) {
      // freqs = inv_freq @ position_ids in fp32 (one product: rounded once); cos, sin of it.
      const double angle = static_cast<float>(p) * inv_freq;
      cos[static_cast<std::size_t>(p) * half + i] = static_cast<float>(std::cos(angle));
      sin[static_cast<std::size_t>(p) * half + i] = static_cast<float>(std::sin(angle));
    }
  }
}

void RopeForward(WorkerPool& pool, float* qkv, const float* cos, const float* sin, int B, int T,
                 int NH, int NKV, int hs, int pos0) {
  RotateRows(pool, qkv, cos, sin, B, T, NH, NKV, hs, pos0, false);
}

void RopeBackward(WorkerPool& pool, float* dqkv, const float* cos, const float* sin, int B, int T,
                  int NH, int NKV, int hs) {
  RotateRows(pool, dqkv, cos, sin, B, T, NH, NKV, hs, 0, true);
}

}  // namespace cputrain::kernels
