// Dropout (nn.Dropout in training) with a counter-based mask: element i's decision is
// DropoutKeep(seed, offset + i, p) (kernels.h), a pure function of its global index, so no mask
// is stored (backward regenerates it) and every split of [0, n) between threads, or between
// calls with matching offsets, gives the same bits.
#include <algorithm>

#include "kernels/kernels.h"

namespace cputrain::kernels {
namespace {

// dst[i] = src[i] * keep(offset + i) * scale over the pool's split of [0, n).
void Drop(WorkerPool& pool, float* dst, const float* src, std::size_t n, float p, uint64_t seed,
          uint64_t offset) {
  if (p == 0.f) {
    if (dst != src) std::copy(src, src + n, dst);
    return;
  }
  const DropoutMask mask(seed, p);
  pool.ParallelFor(n, [&](std::size_t b, std::size_t e, int) {
    for (std::size_t i = b; i < e; ++i) dst[i] = mask.Keep(offset + i) ? src[i] * mask.scale : 0.f;
  });
}

}  // namespace

void DropoutForward(WorkerPool& pool, float* out, const float* inp, std::size_t n, float p,
                    uint64_t seed, uint64_t offset) {
  Drop(pool, out, inp, n, p, seed, offset);
}

// The same linear map: a kept element passes its gradient scaled by 1/(1-p), a dropped one none.
void DropoutBackward(WorkerPool& pool, float* dinp, const float* dout, std::size_t n, float p,
                     uint64_t seed, uint64_t offset) {
  Drop(pool, dinp, dout, n, p, seed, offset);
}

}  // namespace cputrain::kernels
