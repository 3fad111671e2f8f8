// A straightforward single-threaded fp32 GEMM of our own, AVX2 + FMA: the third column of
// `bench gemm`, there to answer "OpenBLAS or our own kernels, whichever the benchmark shows
// faster" with a measurement rather than an opinion.
//
// Design (the textbook Goto/BLIS structure, nothing clever):
//   for each NC-wide column block of B:  for each KC-deep slice:   pack B (KC x NC) into 16-wide
//   panels;  for each MC-tall row block of A:  pack A (MC x KC) into 6-tall panels;  for each
//   6x16 tile:  the micro-kernel keeps the 6x16 tile of C in 12 ymm registers and does, per k,
//   2 loads of B, 6 broadcasts of A and 12 FMAs.
// MC = 168, KC = 256, NC = 4080 (BLIS's Haswell sgemm blocking: an A block of 168 KiB stays in
// L2, a 16 KiB B micro-panel in L1). Packing reads any strides, so transposed operands cost
// nothing extra in the kernel. Edges (m < 6, n < 16) go through a tile buffer.
//
// Thread safety: reentrant; packing buffers are per thread (thread_local).
#pragma once

#include <cstddef>

namespace cputrain::bench {

// A read-only strided view: element (i, j) is p[i * rs + j * cs].
struct MatView {
  const float* p;
  std::ptrdiff_t rs, cs;
};

// C (M x N, row stride ldc) = A (M x K) @ B (K x N), or C += A @ B with accumulate.
void OwnSgemm(int M, int N, int K, MatView A, MatView B, float* C, std::ptrdiff_t ldc,
              bool accumulate);

}  // namespace cputrain::bench
