#include "bench/stream.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "bench/bench.h"
#include "comm/kernels.h"

namespace cputrain::bench {

void TouchStreamArrays(WorkerPool& pool, float* a, float* b, float* c, std::size_t elems) {
  pool.ParallelFor(elems, [&](std::size_t lo, std::size_t hi, int) {
    for (std::size_t i = lo; i < hi; ++i) {
      // Index-dependent, so that no two pages are equal (see collectives_bench.cc: the host may
      // merge identical pages).
      a[i] = static_cast<float>(i);
      b[i] = static_cast<float>(i) + 1.0f;
      c[i] = 0.5f * static_cast<float>(i);
    }
  });
}

StreamResult MeasureStream(WorkerPool& pool, std::size_t elems, int reps) {
  const std::size_t bytes = elems * sizeof(float);
  MappedBuffer a(bytes), b(bytes), c(bytes);
  TouchStreamArrays(pool, a.floats(), b.floats(), c.floats(), elems);
  return MeasureStreamOn(pool, a.floats(), b.floats(), c.floats(), elems, reps);
}

StreamResult MeasureStreamOn(WorkerPool& pool, float* a, float* b, float* c, std::size_t elems,
                             int reps, bool with_nt) {
  const std::size_t bytes = elems * sizeof(float);
  float* __restrict pa = a;
  float* __restrict pb = b;
  float* __restrict pc = c;
  auto copy = [&](std::size_t lo, std::size_t hi, int) {
    for (std::size_t i = lo; i < hi; ++i) pc[i] = pa[i];
  };
  auto triad = [&](std::size_t lo, std::size_t hi, int) {
    const float s = 3.0f;
    for (std::size_t i = lo; i < hi; ++i) pa[i] = pb[i] + s * pc[i];
  };
  // The same two kernels with non-temporal stores (no read-for-ownership of the destination):
  // what the collectives use for large buffers, so their bound must allow for it.
  auto copy_nt = [&](std::size_t lo, std::size_t hi, int) {
    comm::CopyStreaming(pc + lo, pa + lo, hi - lo);
  };
  auto triad_nt = [&](std::size_t lo, std::size_t hi, int) {
    const __m256 s = _mm256_set1_ps(3.0f);
    std::size_t i = lo;
    for (; i < hi && (reinterpret_cast<std::uintptr_t>(pa + i) & 31) != 0; ++i) {
      pa[i] = pb[i] + 3.0f * pc[i];
    }
    for (; i + 8 <= hi; i += 8) {
      _mm256_stream_ps(pa + i, _mm256_add_ps(_mm256_loadu_ps(pb + i),
                                             _mm256_mul_ps(s, _mm256_loadu_ps(pc + i))));
    }
    for (; i < hi; ++i) pa[i] = pb[i] + 3.0f * pc[i];
    _mm_sfence();
  };
  auto best = [&](FunctionRef<void(std::size_t, std::size_t, int)> kernel) {
    double t_best = std::numeric_limits<double>::infinity();
    for (int r = 0; r <= reps; ++r) {  // r == 0 is the warm-up
      const double t0 = NowSeconds();
      pool.ParallelFor(elems, kernel);
      const double t = NowSeconds() - t0;
      if (r > 0) t_best = std::min(t_best, t);
    }
    return t_best;
  };
  StreamResult res;
  res.array_bytes = bytes;
  res.threads = pool.size();
  res.copy_seconds = best(copy);
  res.triad_seconds = best(triad);
  res.copy_gbs = 2.0 * static_cast<double>(bytes) / res.copy_seconds / 1e9;
  res.triad_gbs = 3.0 * static_cast<double>(bytes) / res.triad_seconds / 1e9;
  if (with_nt) {
    res.copy_nt_seconds = best(copy_nt);
    res.triad_nt_seconds = best(triad_nt);
    res.copy_nt_gbs = 2.0 * static_cast<double>(bytes) / res.copy_nt_seconds / 1e9;
    res.triad_nt_gbs = 3.0 * static_cast<double>(bytes) / res.triad_nt_seconds / 1e9;
  }
  return res;
}

}  // namespace cputrain::bench
