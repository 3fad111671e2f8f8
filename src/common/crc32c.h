// CRC32C (Castagnoli), the checksum of checkpoints (docs/formats.md): the SSE4.2 crc32
// instruction (every x86-64-v2 CPU and later; this project builds for x86-64-v3), three
// independent streams interleaved to hide its 3-cycle latency and joined with a GF(2) shift.
// Writers checksum what they write as they write it (common/files.h, AtomicFileWriter).
#pragma once

#include <cstddef>
#include <cstdint>

namespace cputrain {

// The CRC32C of data[0, n) continued from `crc`, the CRC32C of what came before (0 for none):
// Crc32c(Crc32c(0, a, na), b, nb) is the CRC32C of a followed by b. Crc32c(0, "123456789", 9)
// is 0xE3069283 (RFC 3720's check value).
uint32_t Crc32c(uint32_t crc, const void* data, std::size_t n);

}  // namespace cputrain
