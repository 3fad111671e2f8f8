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
    mask.Apply(dst + b, src + b, e - b, offset + b);
  });
}

// The same over packed rows: row r's elements from index offset + RowElement(row_index, r, w).
void DropRows(WorkerPool& pool, float* dst, const float* src, std::size_t rows, std::size_t w,
              float p, uint64_t seed, uint64_t offset, const uint32_t* row_index) {
  if (row_index == nullptr || p == 0.f) {
    Drop(pool, dst, src, rows * w, p, seed, offset);
    return;
  }
  const DropoutMask mask(seed, p);
  pool.ParallelFor(rows, [&](std::size_t b, std::size_t e, int) {
    for (std::size_t r = b; r < e; ++r)
      mask.Apply(dst + r * w, src + r * w, w, offset + RowElement(row_index, r, w));
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

void DropoutRowsForward(WorkerPool& pool, float* out, const float* inp, std::size_t rows,
                        std::size_t width, float p, uint64_t seed, uint64_t offset,
                        const uint32_t* row_index) {
  DropRows(pool, out, inp, rows, width, p, seed, offset, row_index);
}

void DropoutRowsBackward(WorkerPool& pool, float* dinp, const float* dout, std::size_t rows,
                         std::size_t width, float p, uint64_t seed, uint64_t offset,
                         const uint32_t* row_index) {
  DropRows(pool, dinp, dout, rows, width, p, seed, offset, row_index);
}

}  // namespace cputrain::kernels
