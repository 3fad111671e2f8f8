#include <algorithm>

#include "kernels/kernels.h"

namespace cputrain::kernels {
namespace {

// Row r of the output: the padded position it holds (itself, unpacked).
std::size_t PaddedOf(const PackedRows& packed, std::size_t r) {
  return packed.row_index ? packed.row_index[r] : r;
}

}  // namespace

void EncoderForward(WorkerPool& pool, float* out, const int* inp, const float* wte,
                    const float* wpe, int B, int T, int C, const int* types, const float* wtt,
                    const PackedRows& packed) {
  const std::size_t N = packed.row_index ? packed.N : static_cast<std::size_t>(B) * T;
  pool.ParallelFor(N, [&](std::size_t b, std::size_t e, int) {
    for (std::size_t r = b; r < e; ++r) {
      const std::size_t i = PaddedOf(packed, r);
      const float* w = wte + static_cast<std::size_t>(inp[i]) * C;
      float* o = out + r * C;
      if (types != nullptr) {  // BERT: (word + token type) + position, as BertEmbeddings adds
        const float* y = wtt + static_cast<std::size_t>(types[i]) * C;
        for (int c = 0; c < C; ++c) o[c] = w[c] + y[c];
        if (wpe == nullptr) continue;
        const float* p = wpe + (i % T) * C;
        for (int c = 0; c < C; ++c) o[c] += p[c];
        continue;
      }
      if (wpe == nullptr) {
        std::copy(w, w + C, o);
        continue;
      }
      const float* p = wpe + (i % T) * C;
      for (int c = 0; c < C; ++c) o[c] = w[c] + p[c];
    }
  });
}

void EncoderBackward(WorkerPool& pool, float* dwte, float* dwpe, const float* dout, const int* inp,
                     int B, int T, int C, bool accumulate, const int* types, float* dwtt, int NTT,
                     const PackedRows& packed) {
  const std::size_t N = packed.row_index ? packed.N : static_cast<std::size_t>(B) * T;
  // Threads own column slices [c0, c1) of every row: two positions with the same token (or token
  // type) never race, and each element's sum runs over positions in order, whatever the split.
  pool.ParallelFor(static_cast<std::size_t>(C), [&](std::size_t c0, std::size_t c1, int) {
    for (int t = 0; dwpe != nullptr && !accumulate && t < T; ++t)
      std::fill(dwpe + static_cast<std::size_t>(t) * C + c0,
                dwpe + static_cast<std::size_t>(t) * C + c1, 0.f);
    // Rows in (b, t) order: each position's sum runs over b in order, padded or packed.
    for (std::size_t r = 0; dwpe != nullptr && r < N; ++r) {
      float* p = dwpe + (PaddedOf(packed, r) % T) * C;
      const float* d = dout + r * C;
      for (std::size_t c = c0; c < c1; ++c) p[c] += d[c];
    }
    const bool typed = types != nullptr && dwtt != nullptr;
    for (int y = 0; typed && !accumulate && y < NTT; ++y)
      std::fill(dwtt + static_cast<std::size_t>(y) * C + c0,
                dwtt + static_cast<std::size_t>(y) * C + c1, 0.f);
    for (std::size_t r = 0; (dwte || typed) && r < N; ++r) {
      const std::size_t i = PaddedOf(packed, r);
      const float* d = dout + r * C;
      if (dwte) {  // null: a frozen embedding
        float* w = dwte + static_cast<std::size_t>(inp[i]) * C;
        for (std::size_t c = c0; c < c1; ++c) w[c] += d[c];
      }
      if (!typed) continue;
      float* y = dwtt + static_cast<std::size_t>(types[i]) * C;
      for (std::size_t c = c0; c < c1; ++c) y[c] += d[c];
    }
  });
}

}  // namespace cputrain::kernels
