// kernels/amx_tiles.h (internal to kernels/): Intel AMX's tile registers as our AMX kernel
// (amx_gemm.h) uses them, behind one small interface with two implementations:
//
//   TileModel  (here) a portable model of the six instructions, as the Intel SDM's pseudo-code
//              defines them: it runs on any CPU, so packing, edges, strides, partial tiles and
//              accumulation are tested everywhere, and on an AMX CPU the same tests hold the
//              real instructions to it;
//   RealTiles  (amx_real.cc, the one file built with -mamx-tile -mamx-bf16) the instructions.
//
// The interface (tile numbers are template arguments: the instructions encode them):
//   void Configure(const TileConfig&)                     LDTILECFG
//   template <int t> void Load(const void* p, size_t s)   TILELOADD  tmm_t, [p + s*row]
//   template <int t> void Zero()                          TILEZERO   tmm_t
//   template <int c, int a, int b> void DotBf16()         TDPBF16PS  tmm_c, tmm_a, tmm_b
//   template <int t> void Store(void* p, size_t s)        TILESTORED [p + s*row], tmm_t
//   void Release()                                        TILERELEASE
//
// Palette 1 (the only one of AMX's first generation): 8 tiles of at most 16 rows x 64 bytes.
// What the model keeps of the SDM's pseudo-code:
//   - LDTILECFG checks the palette's limits (rows <= 16, colsb <= 64, a tile's rows and colsb
//     both zero or both not) and zeroes every tile; palette 0 is TILERELEASE.
//   - TILELOADD reads rows [0, rows) of colsb bytes, each at p + row * stride, and zeroes the
//     rest of each row (write_row_and_zero) and every row past `rows` (zero_upper_rows).
//   - TILESTORED writes rows [0, rows), colsb bytes each; nothing else.
//   - TDPBF16PS (c (M x N fp32) += a (M x K pairs of bf16) . b (K pair-rows x N pairs)) needs
//     c.rows == a.rows, a.colsb / 4 == b.rows and c.colsb == b.colsb (else #UD; the model checks).
//     Per row m: two fp32 partial sums per output column, temp[2n] over the even elements of the
//     pairs and temp[2n+1] over the odd ones, each a chain of FMAs over k; then c[m][n] +=
//     (temp[2n] + temp[2n+1]). Round to nearest even throughout, input denormals read as zero
//     (DAZ), output denormals written as zero (FTZ), MXCSR neither read nor written; bytes of a
//     row past colsb and rows past `rows` are zeroed.
// (The SDM's older wording, kept in the intrinsics guide, adds each product into c[m][n] in turn;
// the two differ only in the order of fp32 additions. Where real tiles exist the tests compare
// them to the model within fp32 reordering bounds and report how many elements agree exactly.)
//
// Thread safety: a TileModel is one thread's tile state, as the real tiles are per thread.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cputrain::kernels::amx {

inline constexpr int kTiles = 8;      // palette 1
inline constexpr int kMaxRows = 16;   // rows of a tile
inline constexpr int kRowBytes = 64;  // bytes of a tile row (colsb at most)

// LDTILECFG's 64-byte memory operand.
struct alignas(64) TileConfig {
  uint8_t palette_id = 0;
  uint8_t start_row = 0;
  uint8_t reserved0[14] = {};
  uint16_t colsb[16] = {};  // bytes per row of tmm0..tmm15 (palette 1: 0..7)
  uint8_t rows[16] = {};    // rows of tmm0..tmm15
};
static_assert(sizeof(TileConfig) == 64, "LDTILECFG reads 64 bytes");

// Palette 1 with every tile rows x colsb.
TileConfig UniformConfig(int rows, int colsb);

class TileModel {
 public:
  void Configure(const TileConfig& cfg);
  void Release();
  void Load(int t, const void* base, std::size_t stride);
  void Zero(int t);
  void DotBf16(int c, int a, int b);
  void Store(int t, void* base, std::size_t stride) const;

  template <int t>
  void Load(const void* base, std::size_t stride) {
    Load(t, base, stride);
  }
  template <int t>
  void Zero() {
    Zero(t);
  }
  template <int c, int a, int b>
  void DotBf16() {
    DotBf16(c, a, b);
  }
  template <int t>
  void Store(void* base, std::size_t stride) const {
    Store(t, base, stride);
  }

  bool configured() const { return configured_; }
  const TileConfig& config() const { return cfg_; }
  // Row r of tile t, kRowBytes bytes (for tests).
  const uint8_t* row(int t, int r) const { return data_[t][r]; }

 private:
  // The tile's configured shape; CPUTRAIN_CHECKs that it is configured (else #UD).
  int Rows(int t) const;
  int Colsb(int t) const;

  TileConfig cfg_;
  bool configured_ = false;
  alignas(64) uint8_t data_[kTiles][kMaxRows][kRowBytes] = {};
};

}  // namespace cputrain::kernels::amx
