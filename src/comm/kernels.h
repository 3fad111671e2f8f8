// The data kernels of the collectives, exposed so that the trainer's bucketed gradient sync
// (comm/bucket_sync.h) and anything else that moves gradients use the very same arithmetic.
//
// Determinism: SumInto adds its sources in index order, one element at a time,
//   dst[i] = (((srcs[0][i] + srcs[1][i]) + srcs[2][i]) + ...) + srcs[nsrc-1][i]
// in IEEE fp32 with no reassociation and no FMA, whatever the vector width, the alignment or how
// a caller splits [0, n) between threads. A result therefore depends only on the inputs, never
// on the thread timing or the work split: this is what makes every collective bit-reproducible.
//
// Aliasing: dst may be the same pointer as any srcs[k] (every source element i is read before
// dst[i] is written); partial overlaps between dst and a source are not allowed. Copy's dst and
// src must not overlap unless equal (then it does nothing).
//
// Payload types: only fp32 is implemented. The kernels are the place where a bf16 payload with
// fp32 accumulation would go (SumIntoT<bf16, float>: widen on load, add in fp32, round on store);
// the communicator already tags every call with a DType (comm/comm.h) and rejects the others.
//
// Thread safety: pure functions on caller-owned memory; any number of threads may call them on
// disjoint destinations.
#pragma once

#include <cstddef>

namespace cputrain::comm {

// How a kernel writes its destination. kStreaming: non-temporal (cache-bypassing) stores for the
// 32-byte-aligned body, then a store fence, so that a release which follows publishes the data
// like ordinary stores would. No read-for-ownership of dst and no eviction of the caller's
// working set; only worth it for destinations far larger than the last-level cache that nobody
// reads soon (the measurement is in docs/collectives.md).
enum class StoreHint { kCached, kStreaming };

// dst[i] = srcs[0][i] + srcs[1][i] + ... + srcs[nsrc-1][i], summed left to right, i in [0, n).
// nsrc >= 1. Streams all sources at once (one pass, each source read once, dst written once),
// 8 floats per AVX2 register, 4 registers per step; with more than 8 sources it works through
// L1-sized blocks so that the order above still holds.
void SumInto(float* dst, const float* const* srcs, int nsrc, std::size_t n);

// The same sum read at an offset: dst[i] = bases[0][offset + i] + ... + bases[nsrc-1][offset + i].
// Lets a caller keep one array of per-group base pointers (registered once) and reduce any
// sub-range of it without building an offset pointer array per call. dst may be
// bases[k] + offset.
void SumIntoAt(float* dst, const float* const* bases, int nsrc, std::size_t offset, std::size_t n,
               StoreHint hint = StoreHint::kCached);

// dst[0, n) = src[0, n).
void Copy(float* dst, const float* src, std::size_t n);

// Copy with StoreHint::kStreaming stores.
void CopyStreaming(float* dst, const float* src, std::size_t n);

}  // namespace cputrain::comm
