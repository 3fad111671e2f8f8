// kernels/bf16_pack.h (internal to kernels/): how our bf16 GEMMs pack their operands into k
// pairs, shared by the VDPBF16PS kernel (bf16_gemm.cc) and the AMX kernel (amx_gemm.h), whose B
// tile is the same pair layout (VNNI: a 32-bit word holds (x[k], x[k+1]) of one column).
//
// Thread safety: pure functions of their arguments.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cputrain::kernels::internal {

// Element (i, j) of a bf16 matrix stored row-major with row stride ld, or, if trans, stored
// transposed: element (i, j) at p[j * ld + i].
struct View {
  const uint16_t* p;
  bool trans;
  int ld;
  uint16_t at(int i, int j) const {
    return trans ? p[static_cast<std::ptrdiff_t>(j) * ld + i]
                 : p[static_cast<std::ptrdiff_t>(i) * ld + j];
  }
};

// Packs `rows` x kc of a matrix into (kc+1)/2 pairs x `width` 32-bit words (pair-major; word
// (p, r) = (x[r][k0 + 2p], x[r][k0 + 2p + 1]), the second zero past kc; rows past `rows`, up to
// `width`, zero): x[r][k] = M.at(r0 + r, k) for an A operand (by_column false), or
// M.at(k, r0 + r) for a B operand (by_column true, r a column). With AVX-512 where the CPU has it
// (gathers and interleaves 32 at a time), else scalar: the same words either way.
void Pack(const View& v, bool by_column, int r0, int k0, int rows, int kc, int width,
          uint32_t* dst);
// The scalar version, for CPUs without AVX-512 and for the tests that hold the vector one to it.
void PackScalar(const View& v, bool by_column, int r0, int k0, int rows, int kc, int width,
                uint32_t* dst);

// Whether this CPU runs the AVX-512 (F and BW) packing.
bool PackVectorized();

// A 16 x 16 transpose of 32-bit words: word c of source row r, which starts at src + r * ld
// (bf16 elements: any stride, no alignment needed), goes to dst[c * ld_dst + r], for the rows r
// whose bit is set in `store`; source rows r >= rows read as zero. In registers (AVX-512F: two
// rounds of unpacks, two of 128-bit shuffles), a load per row and a masked store per column: the
// k-contiguous packing's core (16 rows' pairs at once, where a gather per pair ran at a fraction of
// it on AMD) and the AMX A packing's. Call only where PackVectorized().
void TransposeWords16(const uint16_t* src, std::ptrdiff_t ld, int rows, uint32_t* dst,
                      std::ptrdiff_t ld_dst, uint16_t store);

}  // namespace cputrain::kernels::internal
