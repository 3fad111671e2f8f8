// Whether this translation unit is built with AddressSanitizer, for the code that adds poisoned
// red zones under ASan (model/transformer.cc's activations, alloc/backend_direct.cc's mappings) and
// keeps the normal build's layout byte-identical.
#pragma once

// <sanitizer/asan_interface.h> defines __has_feature for GCC, which sets __SANITIZE_ADDRESS__.
#if defined(__SANITIZE_ADDRESS__)
#define CPUTRAIN_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CPUTRAIN_ASAN 1
#endif
#endif
#ifndef CPUTRAIN_ASAN
#define CPUTRAIN_ASAN 0
#endif

namespace cputrain {
inline constexpr bool kAsan = CPUTRAIN_ASAN != 0;
}  // namespace cputrain
