// Matrix products through the fp32 sgemm (kernels/sgemm.h: the kernel the calibration measured
// fastest for the product's class; kernels.h, Fp32Kernel), one single-threaded call per pool
// worker on its own slice of
// the output (see InitBlas). The slice is the output's larger dimension, rounded to 16
// (a 64-byte line of floats): for the LM head (N = B*T = 512, OC = 50257) splitting OC keeps each
// worker reading only its rows of the 154 MB weight once.
#include <fmt/format.h>

#include <algorithm>

#include "common/error.h"
#include "kernels/kernels.h"
#include "kernels/matmul_split.h"
#include "kernels/sgemm.h"

extern "C" {
// OpenBLAS extensions (declared in openblas_config.h of some builds; declared here to be sure).
void openblas_set_num_threads(int num_threads);
int openblas_get_parallel(void);
}

namespace cputrain::kernels {
namespace {

int I(std::size_t v) { return static_cast<int>(v); }

}  // namespace

void MatmulSlice(std::size_t n, int parts, int tid, std::size_t* b, std::size_t* e) {
  const std::size_t blocks = (n + 15) / 16;
  std::size_t bb, be;
  WorkerPool::Split(blocks, parts, tid, &bb, &be);
  *b = std::min(n, bb * 16);
  *e = std::min(n, be * 16);
}

void InitBlas() {
  static const bool ok = [] {
    // 0 = sequential build: unsafe for concurrent callers (docs/machine-notes.md, OpenBLAS issue
    // #2711).
    if (openblas_get_parallel() == 0) {
      throw RuntimeError(
          "the OpenBLAS loaded is the serial build, which returns wrong results when several "
          "threads call it at once",
          "use Debian's pthread build: `update-alternatives --set "
          "libopenblas.so.0-x86_64-linux-gnu "
          "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0`");
    }
    openblas_set_num_threads(1);
    return true;
  }();
  (void)ok;
}

void MatmulForward(WorkerPool& pool, float* out, const float* inp, const float* weight,
                   const float* bias, std::size_t N, int C, int OC, int ldo, GemmSite site) {
  const GemmClass cls = site == GemmSite::kHead ? GemmClass::kHeadFwd : GemmClass::kFwd;
  internal::ForwardBlocks(
      pool, out, bias, N, OC, ldo,
      [&](std::size_t r0, std::size_t r1, std::size_t c0, std::size_t c1, bool add) {
        // out[r0:r1, c0:c1] (+)= inp[r0:r1, :] @ weight[c0:c1, :]^T
        internal::Sgemm(cls, false, true, I(r1 - r0), I(c1 - c0), C, 1.f, inp + r0 * C, C,
                        weight + c0 * C, C, add ? 1.f : 0.f, out + r0 * ldo + c0, ldo);
      });
}

void MatmulBackward(WorkerPool& pool, float* dinp, float* dweight, float* dbias, const float* dout,
                    const float* inp, const float* weight, std::size_t N, int C, int OC, int ldd,
                    bool accumulate, GemmSite site) {
  const bool head = site == GemmSite::kHead;
  const GemmClass dinp_cls = head ? GemmClass::kHeadDinp : GemmClass::kDinp;
  const GemmClass dw_cls = head ? GemmClass::kHeadDweight : GemmClass::kDweight;
  internal::BackwardBlocks(
      pool, dinp != nullptr, dweight != nullptr, dbias, dout, N, C, OC, ldd, accumulate,
      [&](bool split_rows, std::size_t b, std::size_t e) {
        // dinp[N,C] = dout[N,OC] @ weight[OC,C], rows or columns [b,e)
        if (split_rows) {
          internal::Sgemm(dinp_cls, false, false, I(e - b), C, OC, 1.f, dout + b * ldd, ldd, weight,
                          C, 0.f, dinp + b * C, C);
        } else {
          internal::Sgemm(dinp_cls, false, false, I(N), I(e - b), OC, 1.f, dout, ldd, weight + b, C,
                          0.f, dinp + b, C);
        }
      },
      [&](std::size_t o0, std::size_t o1) {
        // dweight[o0:o1, :] (+)= dout[:, o0:o1]^T @ inp
        internal::Sgemm(dw_cls, true, false, I(o1 - o0), C, I(N), 1.f, dout + o0, ldd, inp, C,
                        accumulate ? 1.f : 0.f, dweight + o0 * C, C);
      });
}

}  // namespace cputrain::kernels
