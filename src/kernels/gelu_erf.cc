// Exact GELU (BERT's hidden_act "gelu"): x Phi(x), Phi the standard normal CDF.
#include <cmath>

#include "kernels/kernels.h"

namespace cputrain::kernels {
namespace {

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

// Phi(x) through erfc, which keeps its relative precision in the left tail (1 + erf(x/sqrt(2))
// cancels there).
inline double Phi(double x) { return 0.5 * std::erfc(-x * kInvSqrt2); }

}  // namespace

void GeluErfForward(WorkerPool& pool, float* out, const float* inp, std::size_t n) {
  pool.ParallelFor(n, [&](std::size_t b, std::size_t e, int) {
    for (std::size_t i = b; i < e; ++i) {
      const double x = inp[i];
      out[i] = static_cast<float>(x * Phi(x));
    }
  });
}

void GeluErfBackward(WorkerPool& pool, float* dinp, const float* inp, const float* dout,
                     std::size_t n) {
  pool.ParallelFor(n, [&](std::size_t b, std::size_t e, int) {
    for (std::size_t i = b; i < e; ++i) {
      const double x = inp[i];
      const double g = Phi(x) + x * kInvSqrt2Pi * std::exp(-0.5 * x * x);
      dinp[i] = static_cast<float>(g * dout[i]);
    }
  });
}

}  // namespace cputrain::kernels
