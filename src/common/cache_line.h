// The cache-line size the tree pads and aligns to: contended atomics sit on a line of their own
// (common/wait.h, comm/), and small NUMA allocations are aligned to one (alloc/numa_alloc.h).
// 64 bytes on every x86-64 we target (CPUTRAIN_ARCH); std::hardware_destructive_interference_size
// is not used because GCC warns that its value may differ between compiler versions.
#pragma once

#include <cstddef>

namespace cputrain {

inline constexpr std::size_t kCacheLine = 64;

}  // namespace cputrain
