#include "bench/attention_gemm.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "bench/bench.h"
#include "bench/stats.h"
#include "kernels/bf16.h"

namespace cputrain::bench {
namespace {

// The tensors of one (b, h) an operand comes from.
enum Src { kQkv = 0, kProbs = 1, kDy = 2 };  // qkv (T,3C); P or dS (T,T); dY (T,C)

// An operand: its tensor, its offset there (the head's columns) and row stride, and whether it is
// stored transposed.
struct Operand {
  Src src;
  int offset, ld;
  bool trans;
};

// One product for head `head`: C (M,N) = A (M,K) @ B (K,N), written with row stride N.
struct Gemm {
  int M, N, K;
  Operand a, b;
};

Gemm ProductOf(const std::string& p, int T, int C, int hs, int head) {
  const Operand q{kQkv, head * hs, 3 * C, false}, k{kQkv, C + head * hs, 3 * C, false},
      v{kQkv, 2 * C + head * hs, 3 * C, false}, P{kProbs, 0, T, false},
      dy{kDy, head * hs, C, false};
  auto t = [](Operand o) {
    o.trans = true;
    return o;
  };
  if (p == "qk") return {T, T, hs, q, t(k)};
  if (p == "av") return {T, hs, T, P, v};
  if (p == "dp") return {T, T, hs, dy, t(v)};
  if (p == "dv") return {T, hs, T, t(P), dy};
  if (p == "dq") return {T, hs, T, P, k};
  return {T, hs, T, t(P), q};  // dk
}

template <typename E>
const E* At(const E* const* base, const Operand& o) {
  return base[o.src] + o.offset;
}

}  // namespace

std::vector<AttentionProductTiming> TimeAttentionProducts(WorkerPool& pool,
                                                          kernels::OnednnGemm* bf16, int B, int T,
                                                          int C, int NH, double target_seconds) {
  const int hs = C / NH;
  const std::size_t per_b[3] = {static_cast<std::size_t>(T) * 3 * C,
                                static_cast<std::size_t>(T) * T, static_cast<std::size_t>(T) * C};
  std::vector<float> f[3], out(static_cast<std::size_t>(B) * NH * T * T), ref(out.size());
  std::vector<uint16_t> h[3];
  for (int i = 0; i < 3; ++i) {
    const std::size_t n = per_b[i] * static_cast<std::size_t>(B) * (i == 1 ? NH : 1);
    f[i].resize(n);
    for (std::size_t j = 0; j < n; ++j) {  // small, varied values (as bench gemm's Fill)
      const uint32_t hash =
          static_cast<uint32_t>(j) * 2654435761u + static_cast<uint32_t>(i) * 40503u;
      f[i][j] = (static_cast<float>(hash >> 8 & 1023) / 1023.0f - 0.5f) * 0.1f;
    }
    h[i].resize(n);
    kernels::ConvertToBf16(pool, h[i].data(), f[i].data(), n);
  }
  std::vector<AttentionProductTiming> rows;
  for (const char* name : {"qk", "av", "dp", "dv", "dq", "dk"}) {
    const Gemm g0 = ProductOf(name, T, C, hs, 0);
    auto run = [&](bool use_bf16) {
      const double t0 = NowSeconds();
      pool.ForEachThread([&](int tid) {
        std::size_t lo, hi;
        WorkerPool::Split(static_cast<std::size_t>(B) * NH, pool.size(), tid, &lo, &hi);
        for (std::size_t bh = lo; bh < hi; ++bh) {
          const std::size_t b = bh / NH;
          const Gemm g = ProductOf(name, T, C, hs, static_cast<int>(bh % NH));
          const float* fb[3] = {f[0].data() + b * per_b[0], f[1].data() + bh * per_b[1],
                                f[2].data() + b * per_b[2]};
          const uint16_t* hb[3] = {h[0].data() + b * per_b[0], h[1].data() + bh * per_b[1],
                                   h[2].data() + b * per_b[2]};
          // Outputs: one (T,T) block per (b, h), its first M x N written (row stride N).
          float* c = (use_bf16 ? out.data() : ref.data()) + bh * per_b[1];
          if (use_bf16) {
            bf16->RunBf16(g.M, g.N, g.K, At(hb, g.a), g.a.trans, g.a.ld, At(hb, g.b), g.b.trans,
                          g.b.ld, c, g.N);
          } else {
            cblas_sgemm(CblasRowMajor, g.a.trans ? CblasTrans : CblasNoTrans,
                        g.b.trans ? CblasTrans : CblasNoTrans, g.M, g.N, g.K, 1.f, At(fb, g.a),
                        g.a.ld, At(fb, g.b), g.b.ld, 0.f, c, g.N);
          }
        }
      });
      return NowSeconds() - t0;
    };
    AttentionProductTiming row{name, g0.M, g0.N, g0.K, 2.0 * g0.M * g0.N * g0.K * B * NH, 0, 0, 0};
    run(false);
    if (bf16) {
      run(true);
      double err = 0, mag = 0;
      for (std::size_t bh = 0; bh < static_cast<std::size_t>(B) * NH; ++bh) {
        for (std::size_t i = bh * per_b[1]; i < bh * per_b[1] + g0.M * g0.N; ++i) {
          err = std::max(err, static_cast<double>(std::fabs(out[i] - ref[i])));
          mag = std::max(mag, static_cast<double>(std::fabs(ref[i])));
        }
      }
      row.bf16_rel_err = mag > 0 ? err / mag : err;
    }
    std::vector<double> t32, t16;
    double spent = 0;
    for (int r = 0; r < 50 && (r < 3 || spent < target_seconds * (bf16 ? 2 : 1)); ++r) {
      t32.push_back(run(false));
      spent += t32.back();
      if (bf16) {
        t16.push_back(run(true));
        spent += t16.back();
      }
    }
    row.fp32_seconds = Median(t32);
    if (bf16) row.bf16_seconds = Median(t16);
    rows.push_back(row);
  }
  return rows;
}

}  // namespace cputrain::bench
