// bench/attention_gemm.h: the matrix products inside attention, timed for `bench gemm`. Our
// training kernel (kernels::AttentionForward/Backward) fuses them with the softmax in fp32 loops;
// bf16 autocast runs them as batched bf16 GEMMs, one per (batch row, head). Here each product is
// one GEMM per (b, h) of head size hs = C/NH, full T x T (the causal half is not skipped):
//
//   qk      S (T,T)   = Q (T,hs) @ K^T          M=T  N=T  K=hs   (forward)
//   av      Y (T,hs)  = P (T,T) @ V (T,hs)      M=T  N=hs K=T    (forward)
//   dp      dP (T,T)  = dY (T,hs) @ V^T         M=T  N=T  K=hs   (backward)
//   dv      dV (T,hs) = P^T @ dY                M=T  N=hs K=T    (backward)
//   dq      dQ (T,hs) = dS (T,T) @ K            M=T  N=hs K=T    (backward)
//   dk      dK (T,hs) = dS^T @ Q                M=T  N=hs K=T    (backward)
//
// Q, K, V are read in place from qkv (B,T,3C) as training lays it out. fp32: OpenBLAS sgemm;
// bf16: oneDNN; both one single-threaded call per (b, h), the B*NH pairs split statically over the
// pool's workers. Implementations interleaved round by round, median reported.
#pragma once

#include <string>
#include <vector>

#include "kernels/onednn.h"
#include "runtime/worker_pool.h"

namespace cputrain::bench {

struct AttentionProductTiming {
  std::string product;                        // qk, av, dp, dv, dq, dk
  int M = 0, N = 0, K = 0;                    // of one (b, h) GEMM
  double flops = 0;                           // of the B*NH GEMMs together
  double fp32_seconds = 0, bf16_seconds = 0;  // medians; bf16 0 when not run
  double bf16_rel_err = 0;                    // max |bf16 - fp32| / max |fp32|
};

// bf16: null to time fp32 only. target_seconds: about how long each implementation runs per
// product (3..50 rounds).
std::vector<AttentionProductTiming> TimeAttentionProducts(WorkerPool& pool,
                                                          kernels::OnednnGemm* bf16, int B, int T,
                                                          int C, int NH, double target_seconds);

}  // namespace cputrain::bench
