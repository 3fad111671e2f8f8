#include "comm/distributed.h"

#include <cstring>

namespace cputrain::comm {

uint64_t Hash64(const void* data, std::size_t bytes, uint64_t h) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}

uint64_t HashFloats(const float* p, std::size_t n) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (std::size_t i = 0; i + 1 < n; i += 2) {
    uint64_t w;
    std::memcpy(&w, p + i, sizeof(w));  // no aliasing games: memcpy compiles to one load
    h = (h ^ w) * 0x100000001b3ULL;
  }
  if (n % 2) h = Hash64(p + n - 1, sizeof(float), h);
  return h;
}

}  // namespace cputrain::comm
