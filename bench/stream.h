// STREAM-style memory bandwidth (McCalpin's copy and triad), measured on a WorkerPool so that it
// uses the same pinned threads as the code it is a yardstick for. The collectives suite uses it
// for the memory-bandwidth bound of its ops; a memory suite can reuse it.
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

}  // namespace cputrain::bench
