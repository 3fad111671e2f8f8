// The real half of our AMX kernel (kernels/amx_gemm.h): the tile instructions themselves, the GEMM
// instantiated on them, and the AMX peak loop. The only file built with -mamx-tile -mamx-bf16
// (CMakeLists.txt, when the compiler has them: CPUTRAIN_AMX_BUILT); nothing here runs unless
// amx::Granted() (CPUID, XCR0, Linux's permission and the self-check against the model).
//
// The instructions are written as inline asm rather than GCC 12's _tile_* intrinsics: those
// macros tell the compiler neither that TILELOADD reads the memory it points at (no "memory"
// clobber: a store to a buffer just before its tile load may be moved past it) nor that LDTILECFG
// reads 64 bytes (its "m" operand is one pointer). Each asm below names what it reads and writes.
#include "common/error.h"
#include "kernels/amx_gemm.h"

namespace cputrain::kernels::amx {

#if defined(CPUTRAIN_AMX_BUILT) && defined(__AMX_TILE__) && defined(__AMX_BF16__)

namespace {

// amx_tiles.h's interface on the hardware (AT&T operand order: sources first).
struct RealTiles {
  void Configure(const TileConfig& cfg) { __asm__ volatile("ldtilecfg %0" ::"m"(cfg)); }
  void Release() { __asm__ volatile("tilerelease" ::: "memory"); }
  template <int t>
  void Load(const void* base, std::size_t stride) {
    __asm__ volatile("tileloadd (%0,%1,1), %%tmm%c2" ::"r"(base), "r"(stride), "i"(t) : "memory");
  }
  template <int t>
  void Zero() {
    __asm__ volatile("tilezero %%tmm%c0" ::"i"(t));
  }
  template <int c, int a, int b>
  void DotBf16() {
    __asm__ volatile("tdpbf16ps %%tmm%c2, %%tmm%c1, %%tmm%c0" ::"i"(c), "i"(a), "i"(b));
  }
  template <int t>
  void Store(void* base, std::size_t stride) const {
    __asm__ volatile("tilestored %%tmm%c2, (%0,%1,1)" ::"r"(base), "r"(stride), "i"(t) : "memory");
  }
};

}  // namespace

bool Built() { return true; }

void RealGemm(int M, int N, int K, const uint16_t* A, bool ta, int lda, const uint16_t* B, bool tb,
              int ldb, float* C, int ldc, bool add) {
  thread_local AmxScratch scratch;
  RealTiles tiles;
  tiles.Configure(UniformConfig(kMaxRows, kRowBytes));
  Gemm(tiles, scratch, M, N, K, {A, ta, lda}, {B, tb, ldb}, C, ldc, add);
  tiles.Release();
}

float RealPeakLoop(uint64_t iters) {
  alignas(64) uint16_t src[kMaxRows * kRowBytes / 2];
  for (uint16_t& v : src) v = 0x3c00;  // bf16 2^-7: the sums stay small and normal
  alignas(64) float out[kMaxRows * kRowBytes / 4];
  RealTiles t;
  t.Configure(UniformConfig(kMaxRows, kRowBytes));
  t.Zero<0>();
  t.Zero<1>();
  t.Zero<2>();
  t.Zero<3>();
  t.Load<4>(src, kRowBytes);
  t.Load<5>(src, kRowBytes);
  t.Load<6>(src, kRowBytes);
  t.Load<7>(src, kRowBytes);
  for (uint64_t i = 0; i < iters; ++i) {
    t.DotBf16<0, 4, 6>();
    t.DotBf16<1, 4, 7>();
    t.DotBf16<2, 5, 6>();
    t.DotBf16<3, 5, 7>();
  }
  float sum = 0;
  t.Store<0>(out, kRowBytes);
  sum += out[0];
  t.Store<3>(out, kRowBytes);
  sum += out[kMaxRows * kRowBytes / 4 - 1];
  t.Release();
  return sum;
}

#else  // the compiler lacks -mamx-tile -mamx-bf16: nothing to run (Granted() is false)

bool Built() { return false; }
void RealGemm(int, int, int, const uint16_t*, bool, int, const uint16_t*, bool, int, float*, int,
              bool) {
  CPUTRAIN_CHECK(false, "amx::RealGemm called in a build without AMX instructions");
}
float RealPeakLoop(uint64_t) {
  CPUTRAIN_CHECK(false, "amx::RealPeakLoop called in a build without AMX instructions");
}

#endif

}  // namespace cputrain::kernels::amx
