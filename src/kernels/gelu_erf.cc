// Exact GELU (BERT's hidden_act "gelu"): x Phi(x), Phi the standard normal CDF, in fp32 vectors of
// 8 (AVX2 + FMA, vmath.h's baseline).
//
// Method. With t = |x| and e = exp(-t^2/2):
//   Phi(-t) = e R(t),   R(t) = Phi(-t) exp(t^2/2)  (the Mills ratio over sqrt(2 pi)),
//   Phi(-t) - t phi(t) = e (R(t) - t/sqrt(2 pi)) = e (t0 - t) E(t),
// t0 = 0.75179... the root of gelu' (at x = -t0), E smooth and positive. Then
//   gelu(x)  = x Phi(-t)             (x < 0)     x (1 - Phi(-t))          (x >= 0)
//   gelu'(x) = e (t0 - t) E(t)       (x < 0)     1 - e (t0 - t) E(t)      (x >= 0)
// so nothing cancels: the left tail (1 + erf(x/sqrt 2) there) and gelu' next to its root keep
// their relative precision. R and E are polynomials of degree 4 on 8 segments of t in [0, 14.5]
// (src/kernels/gen_gelu_erf_tables.py fits them: weighted least squares at Chebyshev nodes,
// coefficients rounded one at a time,
// within 0.75 * 2^-24 relative; the coefficient of each lane's segment is a permute of one
// register). Segment k is [T(k), T(k+1)], T(u) = K u / (A - u), so u = A t / (t + K) picks it;
// the polynomial's variable s = (t - t_k) B_k / (t + K) is u - u(t_k) with its error relative to
// s, not to u (an error in u of one ulp of 8 would move t by 6 ulp at the far end). e is
// exp(-(h + l)/2) with t^2 = h + l exact (FMA), Cody-Waite reduction and vmath.h's Exp8 polynomial
// (Cephes expf, ExpReduced8); its 2^n is applied last, in two halves, after the product with x, so
// that results down to the subnormals (x ~ -14) keep theirs; |x| > 15 is computed as 15 (gelu = x
// or -0, gelu' = 1 or -0), so +-inf give the limits, NaN stays NaN.
//
// Accuracy, measured against long double on a grid of step 1e-4 over [-12, 12] (tests/
// kernels_fd_test.cc, GeluErf, which bounds it at 4 ulp down to -14.5): forward at most 2.90 ulp,
// backward (gelu' itself, dout = 1) 2.97 ulp. The scalar double erfc this replaced was within 0.5.
// Cost on one core of the development machine (AMD EPYC, 4M values of N(0, 2^2), best of 7 runs,
// the tanh GELU timed alongside at 0.60 / 0.78): 0.94 ns per element forward, 0.95 backward,
// against 10.7 and 16 for the scalar version. At BERT-base and B*T = 4096 that is ~0.15 s of one
// core a step each way, not the ~4 s it was; an AVX-512 copy (16 segments, a lower degree) would
// save little of that and need the run-time dispatch bf16_gemm.cc uses, so there is none.
//
// Results do not depend on the pool size or a value's position: lanes are independent and a
// range's tail goes through the same code, padded (vmath.h's LoadPartial).
#include "kernels/kernels.h"
#include "kernels/vmath.h"

namespace cputrain::kernels {
namespace {

// |x| is clamped to kTMax: gelu(-15) and gelu'(-15) are below denorm_min / 2 (gelu'(-14.5) is not),
// 1 - Phi(15) == 1 in fp32. The segments cover [0, 14.5]; past 14.6 every result is 0 (or x, 1).
constexpr float kTMax = 15.f;
constexpr float kK = 3.f;
constexpr float kA = 9.655181884765625f;  // 8 (14.5 + kK) / 14.5, a little more
// t0 = 0.75179152469356445746 as kT0Hi + kT0Lo.
constexpr float kT0Hi = 0.751791537f;
constexpr float kT0Lo = -1.21144495e-08f;

// Fitted in mpmath (40 digits) as the header says: segment centres t_k, the scales B_k =
// A K / (t_k + K), then R's and E's coefficients of s^0..s^4 per segment.
alignas(32) constexpr float kCentre[8] = {0.163841635f, 0.551796377f, 1.04819143f, 1.70587969f,
                                          2.61872435f,  3.97094536f,  6.1803093f,  10.4399538f};
alignas(32) constexpr float kScale[8] = {9.15518188f, 8.15518188f, 7.15518188f, 6.15518188f,
                                         5.15518188f, 4.15518188f, 3.15518188f, 2.15518188f};
alignas(32) constexpr float kR[5][8] = {
    {0.440804869f, 0.338320762f, 0.255100012f, 0.188584983f, 0.136102006f, 0.0950334072f,
     0.062978521f, 0.0378716625f},
    {-0.11290773f, -0.092444025f, -0.0744263828f, -0.059052296f, -0.0463527478f, -0.036186628f,
     -0.0282683428f, -0.0222246647f},
    {0.010792641f, 0.00964300055f, 0.00835769251f, 0.0070135654f, 0.00569791207f, 0.00449253898f,
     0.00345743494f, 0.00261945394f},
    {-0.0003532017f, -0.000409181957f, -0.000442477874f, -0.000447720813f, -0.000423882128f,
     -0.000375623989f, -0.00031263486f, -0.000246508862f},
    {-1.66922327e-05f, -1.11323634e-05f, -4.63928654e-06f, 2.65736912e-06f, 9.27896326e-06f,
     1.43518782e-05f, 1.66876944e-05f, 1.60186046e-05f},
};
alignas(32) constexpr float kE[5][8] = {
    {0.638560414f, 0.590943575f, 0.550161719f, 0.515636384f, 0.486690164f, 0.462588817f,
     0.442590088f, 0.425990731f},
    {-0.0511959232f, -0.0441129394f, -0.0375477411f, -0.0316165574f, -0.0263990667f, -0.0219281577f,
     -0.0181871466f, -0.0151166422f},
    {0.00364835793f, 0.00342309591f, 0.00313212699f, 0.00279172463f, 0.00242285477f, 0.00204972876f,
     0.00169649639f, 0.00138143741f},
    {-6.32500087e-05f, -8.6540429e-05f, -0.000106083433f, -0.000119481723f, -0.000124994709f,
     -0.000122131329f, -0.000112060174f, -9.7312397e-05f},
    {-6.01501642e-06f, -5.99263103e-06f, -3.18147386e-06f, -1.65837662e-06f, -6.48835339e-07f,
     1.36664551e-06f, 3.16422711e-06f, 4.07575135e-06f},
};

inline __m256 Lane(const float* table, __m256i k) {
  return _mm256_permutevar8x32_ps(_mm256_load_ps(table), k);
}

// The parts both directions share, for t = min(|x|, kTMax): e = exp(-t^2/2) = p 2^n, and the
// segment k and variable s of t.
struct Parts {
  __m256 t, p, s;
  __m256i n, k;
};

inline Parts Split(__m256 x) {
  Parts q;
  // min(c, NaN) is NaN: the second operand is returned when one is NaN.
  q.t = _mm256_min_ps(_mm256_set1_ps(kTMax), _mm256_andnot_ps(_mm256_set1_ps(-0.f), x));
  const __m256 h = _mm256_mul_ps(q.t, q.t), l = _mm256_fmsub_ps(q.t, q.t, h);
  const __m256 a = _mm256_mul_ps(h, _mm256_set1_ps(-0.5f));  // exact
  const __m256 nf = _mm256_round_ps(_mm256_mul_ps(a, _mm256_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(nf, _mm256_set1_ps(0.693359375f), a);  // exact: n*C1 has 17 bits
  r = _mm256_fnmadd_ps(nf, _mm256_set1_ps(-2.12194440e-4f), r);
  r = _mm256_fnmadd_ps(l, _mm256_set1_ps(0.5f), r);
  q.p = ExpReduced8(r);
  q.n = _mm256_cvtps_epi32(nf);  // in [-163, 0]
  const __m256 inv = _mm256_div_ps(_mm256_set1_ps(1.f), _mm256_add_ps(q.t, _mm256_set1_ps(kK)));
  const __m256 u = _mm256_mul_ps(_mm256_mul_ps(q.t, _mm256_set1_ps(kA)), inv);
  q.k = _mm256_min_epi32(_mm256_cvttps_epi32(u), _mm256_set1_epi32(7));  // NaN: low bits 0
  q.s =
      _mm256_mul_ps(_mm256_mul_ps(_mm256_sub_ps(q.t, Lane(kCentre, q.k)), Lane(kScale, q.k)), inv);
  return q;
}

inline __m256 Poly(const float (*c)[8], __m256i k, __m256 s) {
  __m256 y = Lane(c[4], k);
  for (int i = 3; i >= 0; --i) y = _mm256_fmadd_ps(y, s, Lane(c[i], k));
  return y;
}

// v 2^n, n in [-163, 0], as two exact scalings by 2^(n/2) so that a subnormal result is rounded
// once.
inline __m256 Scale(__m256 v, __m256i n) {
  const __m256i n1 = _mm256_srai_epi32(n, 1), n2 = _mm256_sub_epi32(n, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  v = _mm256_mul_ps(v, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23)));
  return _mm256_mul_ps(v, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23)));
}

inline __m256 Gelu8(__m256 x) {
  const Parts q = Split(x);
  const __m256 neg = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ);
  // x < 0: -t Phi(-t); else Phi(-t), then x (1 - Phi(-t)).
  const __m256 f =
      _mm256_blendv_ps(_mm256_set1_ps(1.f), _mm256_sub_ps(_mm256_setzero_ps(), q.t), neg);
  const __m256 v = Scale(_mm256_mul_ps(_mm256_mul_ps(q.p, Poly(kR, q.k, q.s)), f), q.n);
  return _mm256_blendv_ps(_mm256_mul_ps(x, _mm256_sub_ps(_mm256_set1_ps(1.f), v)), v, neg);
}

inline __m256 GeluGrad8(__m256 x, __m256 dout) {
  const Parts q = Split(x);
  const __m256 neg = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ);
  const __m256 d = _mm256_add_ps(_mm256_sub_ps(_mm256_set1_ps(kT0Hi), q.t), _mm256_set1_ps(kT0Lo));
  const __m256 v = Scale(_mm256_mul_ps(_mm256_mul_ps(q.p, Poly(kE, q.k, q.s)), d), q.n);
  const __m256 g = _mm256_blendv_ps(_mm256_sub_ps(_mm256_set1_ps(1.f), v), v, neg);
  return _mm256_mul_ps(g, dout);
}

}  // namespace

void GeluErfForward(WorkerPool& pool, float* out, const float* inp, std::size_t n) {
  pool.ParallelFor(n, [&](std::size_t b, std::size_t e, int) {
    std::size_t i = b;
    for (; i + 8 <= e; i += 8) _mm256_storeu_ps(out + i, Gelu8(_mm256_loadu_ps(inp + i)));
    if (i < e) StorePartial(out + i, e - i, Gelu8(LoadPartial(inp + i, e - i, 0.f)));
  });
}

void GeluErfBackward(WorkerPool& pool, float* dinp, const float* inp, const float* dout,
                     std::size_t n) {
  pool.ParallelFor(n, [&](std::size_t b, std::size_t e, int) {
    std::size_t i = b;
    for (; i + 8 <= e; i += 8) {
      _mm256_storeu_ps(dinp + i, GeluGrad8(_mm256_loadu_ps(inp + i), _mm256_loadu_ps(dout + i)));
    }
    if (i < e) {
      StorePartial(dinp + i, e - i,
                   GeluGrad8(LoadPartial(inp + i, e - i, 0.f), LoadPartial(dout + i, e - i, 0.f)));
    }
  });
}

}  // namespace cputrain::kernels
