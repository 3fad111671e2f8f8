#include <algorithm>

#include "kernels/kernels.h"

namespace cputrain::kernels {

void EncoderForward(WorkerPool& pool, float* out, const int* inp, const float* wte,
                    const float* wpe, int B, int T, int C, const int* types, const float* wtt) {
  pool.ParallelFor(static_cast<std::size_t>(B) * T, [&](std::size_t b, std::size_t e, int) {
    for (std::size_t i = b; i < e; ++i) {
      const float* w = wte + static_cast<std::size_t>(inp[i]) * C;
      float* o = out + i * C;
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
                     int B, int T, int C, bool accumulate, const int* types, float* dwtt, int NTT) {
  // Threads own column slices [c0, c1) of every row: two positions with the same token (or token
  // type) never race, and each element's sum runs over positions in order, whatever the split.
  pool.ParallelFor(static_cast<std::size_t>(C), [&](std::size_t c0, std::size_t c1, int) {
    for (int t = 0; t < T; ++t) {
      if (dwpe == nullptr) break;  // no positions
      float* p = dwpe + static_cast<std::size_t>(t) * C;
      if (!accumulate) std::fill(p + c0, p + c1, 0.f);
      for (int b = 0; b < B; ++b) {
        const float* d = dout + (static_cast<std::size_t>(b) * T + t) * C;
        for (std::size_t c = c0; c < c1; ++c) p[c] += d[c];
      }
    }
    const bool typed = types != nullptr && dwtt != nullptr;
    for (int y = 0; typed && !accumulate && y < NTT; ++y)
      std::fill(dwtt + static_cast<std::size_t>(y) * C + c0,
                dwtt + static_cast<std::size_t>(y) * C + c1, 0.f);
    for (std::size_t i = 0; (dwte || typed) && i < static_cast<std::size_t>(B) * T; ++i) {
      const float* d = dout + i * C;
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
