#include "common/crc32c.h"

#include <nmmintrin.h>

#include <cstring>

namespace cputrain {
namespace {

constexpr uint32_t kPoly = 0x82f63b78;  // CRC32C's polynomial, bit-reflected
constexpr std::size_t kStripe = 8192;   // bytes of each of the three streams per round

// a * b modulo the polynomial, both bit-reflected (x^0 is the top bit): zlib's multmodp.
uint32_t MultModP(uint32_t a, uint32_t b) {
  uint32_t m = 1u << 31, p = 0;
  for (;;) {
    if (a & m) {
      p ^= b;
      if ((a & (m - 1)) == 0) break;
    }
    m >>= 1;
    b = b & 1 ? (b >> 1) ^ kPoly : b >> 1;
  }
  return p;
}

// x^(8n) modulo the polynomial: multiplying a CRC register by it appends n zero bytes.
uint32_t ZeroBytesOperator(std::size_t n) {
  uint32_t result = 1u << 31, x = 1u << 30;  // 1 and x^1
  for (uint64_t e = 8 * static_cast<uint64_t>(n); e != 0; e >>= 1) {
    if (e & 1) result = MultModP(result, x);
    x = MultModP(x, x);
  }
  return result;
}

uint32_t Bytes(uint32_t r, const unsigned char* p, std::size_t n) {
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    r = static_cast<uint32_t>(_mm_crc32_u64(r, w));
  }
  for (; n > 0; --n) r = _mm_crc32_u8(r, *p++);
  return r;
}

}  // namespace

uint32_t Crc32c(uint32_t crc, const void* data, std::size_t n) {
  static const uint32_t kShift = ZeroBytesOperator(kStripe);
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t r = ~crc;  // the register: the CRC before its final inversion
  // Rounds of three stripes a|b|c: a continues r, b and c start from 0; then
  // r = shift(shift(a) ^ b) ^ c, the register after all three (the CRC is linear).
  for (; n >= 3 * kStripe; n -= 3 * kStripe, p += 3 * kStripe) {
    uint64_t a = r, b = 0, c = 0;
    for (std::size_t i = 0; i < kStripe; i += 8) {
      uint64_t wa, wb, wc;
      std::memcpy(&wa, p + i, 8);
      std::memcpy(&wb, p + kStripe + i, 8);
      std::memcpy(&wc, p + 2 * kStripe + i, 8);
      a = _mm_crc32_u64(a, wa);
      b = _mm_crc32_u64(b, wb);
      c = _mm_crc32_u64(c, wc);
    }
    r = MultModP(kShift, static_cast<uint32_t>(a)) ^ static_cast<uint32_t>(b);
    r = MultModP(kShift, r) ^ static_cast<uint32_t>(c);
  }
  return ~Bytes(r, p, n);
}

}  // namespace cputrain
