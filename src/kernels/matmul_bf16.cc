// The bf16 matrix products (kernels/bf16.h): each operand converted to bf16 once (a pass over
// the pool), then one Bf16Gemm per worker on the same slice of the output as the fp32 products
// (matmul.cc), so the work split, and with it the bit-identical reruns, are the same.
#include "kernels/bf16.h"
#include "kernels/kernels.h"
#include "kernels/matmul_split.h"

namespace cputrain::kernels {
namespace {

int I(std::size_t v) { return static_cast<int>(v); }

}  // namespace

void MatmulForwardBf16(WorkerPool& pool, float* out, const float* inp, uint16_t* inp_bf16,
                       const uint16_t* weight, const float* bias, std::size_t N, int C, int OC,
                       int ldo, GemmSite site) {
  const GemmClass cls = site == GemmSite::kHead ? GemmClass::kHeadFwd : GemmClass::kFwd;
  ConvertToBf16(pool, inp_bf16, inp, N * C);
  internal::ForwardBlocks(
      pool, out, bias, N, OC, ldo,
      [&](std::size_t r0, std::size_t r1, std::size_t c0, std::size_t c1, bool add) {
        // out[r0:r1, c0:c1] (+)= inp[r0:r1, :] @ weight[c0:c1, :]^T (weight stored (OC,C): B
        // given as (N,K))
        Bf16Gemm(cls, I(r1 - r0), I(c1 - c0), C, inp_bf16 + r0 * C, false, C, weight + c0 * C, true,
                 C, out + r0 * ldo + c0, ldo, add);
      });
}

void MatmulBackwardBf16(WorkerPool& pool, float* dinp, float* dweight, float* dbias,
                        const float* dout, uint16_t* dout_bf16, const float* inp,
                        uint16_t* inp_bf16, const uint16_t* weight, std::size_t N, int C, int OC,
                        int ldd, bool accumulate, GemmSite site) {
  const bool head = site == GemmSite::kHead;
  const GemmClass dinp_cls = head ? GemmClass::kHeadDinp : GemmClass::kDinp;
  const GemmClass dw_cls = head ? GemmClass::kHeadDweight : GemmClass::kDweight;
  // Row n of dout holds OC values at stride ldd; converting the whole N*ldd keeps the stride
  // (the LM head's padding columns, never written by forward, are zero and unused).
  ConvertToBf16(pool, dout_bf16, dout, N * ldd);
  if (dweight) ConvertToBf16(pool, inp_bf16, inp, N * C);  // dweight's operand only
  internal::BackwardBlocks(
      pool, dinp != nullptr, dweight != nullptr, dbias, dout, N, C, OC, ldd, accumulate,
      [&](bool split_rows, std::size_t b, std::size_t e) {
        // dinp[N,C] = dout[N,OC] @ weight[OC,C], rows or columns [b,e)
        if (split_rows) {
          Bf16Gemm(dinp_cls, I(e - b), C, OC, dout_bf16 + b * ldd, false, ldd, weight, false, C,
                   dinp + b * C, C);
        } else {
          Bf16Gemm(dinp_cls, I(N), I(e - b), OC, dout_bf16, false, ldd, weight + b, false, C,
                   dinp + b, C);
        }
      },
      [&](std::size_t o0, std::size_t o1) {
        // dweight[o0:o1, :] (+)= dout[:, o0:o1]^T @ inp (dout stored (N,OC): A transposed)
        Bf16Gemm(dw_cls, I(o1 - o0), C, I(N), dout_bf16 + o0, true, ldd, inp_bf16, false, C,
                 dweight + o0 * C, C, accumulate);
      });
}

}  // namespace cputrain::kernels
