// STREAM-style memory bandwidth (McCalpin's copy and triad), measured on a WorkerPool so that it
// uses the same pinned threads as the code it is a yardstick for. The collectives suite uses it
// for the memory-bandwidth bound of its ops; the memory suite runs it per NUMA node and for every
// (CPU node, memory node) pair on arrays it places itself (MeasureStreamOn).
#pragma once

#include <cstddef>

#include "runtime/worker_pool.h"

namespace cputrain::bench {

struct StreamResult {
  std::size_t array_bytes = 0;  // each of the three arrays
  int threads = 0;
  // STREAM's byte counting (no write-allocate traffic): copy c = a moves 2 arrays, triad
  // a = b + s*c moves 3. Seconds are the best of the repetitions (STREAM's convention).
  double copy_seconds = 0, copy_gbs = 0;
  double triad_seconds = 0, triad_gbs = 0;
  // The same kernels with non-temporal stores (the destination is not read for ownership, so
  // fewer bytes really move than are counted).
  double copy_nt_seconds = 0, copy_nt_gbs = 0;
  double triad_nt_seconds = 0, triad_nt_gbs = 0;

  // The best of the two store kinds: the yardstick for code that may use either.
  double best_copy_gbs() const { return copy_gbs > copy_nt_gbs ? copy_gbs : copy_nt_gbs; }
  double best_triad_gbs() const { return triad_gbs > triad_nt_gbs ? triad_gbs : triad_nt_gbs; }
};

// Three arrays of `elems` floats, first-touched by the pool's threads with the same static
// split as the kernels (so each thread's pages are local to it); `reps` timed repetitions after
// one warm-up. Plain stores as in STREAM, then the same with non-temporal stores.
StreamResult MeasureStream(WorkerPool& pool, std::size_t elems, int reps);

// The same kernels on arrays the caller allocated, placed and initialized (finite values: the
// triad computes on them). with_nt = false skips the non-temporal variants (their fields stay 0).
StreamResult MeasureStreamOn(WorkerPool& pool, float* a, float* b, float* c, std::size_t elems,
                             int reps, bool with_nt = true);

// Fills the three arrays with index-dependent finite values from the pool's threads, split as
// the kernels split them (first touch places each thread's pages, when nothing binds them).
void TouchStreamArrays(WorkerPool& pool, float* a, float* b, float* c, std::size_t elems);

}  // namespace cputrain::bench
