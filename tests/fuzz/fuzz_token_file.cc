// Fuzz target: the token-file reader (data::TokenFile, src/data/token_file.h), on the input as a
// file. A file it accepts (version 1, uint16 ids, or 2, uint32) must hold exactly the header's
// count of tokens: every one is read, one by one and in windows as the trainer reads them (under
// ASan a read past the mapping is a finding), and CheckBelow must find the largest.
#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "common/error.h"
#include "data/token_file.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  cputrain::fuzz::MemFile file(data, size);
  try {
    cputrain::data::TokenFile tokens = cputrain::data::TokenFile::Open(file.path());
    const std::size_t width = tokens.version() == cputrain::data::kTokenFileVersion ? 2 : 4;
    if (tokens.size() == 0 ||
        cputrain::data::kTokenFileHeaderBytes + width * tokens.size() != size) {
      std::abort();  // Open promises a non-empty file whose size matches its header
    }
    // Reads every token, one at a time and in windows (the trainer's path), which must agree;
    // CheckBelow must accept the largest id + 1 and refuse the largest id.
    int64_t max = 0;
    std::vector<int> window(64);
    for (std::size_t i = 0; i < tokens.size(); i += window.size()) {
      const std::size_t n = std::min(window.size(), tokens.size() - i);
      tokens.Read(i, n, window.data());
      for (std::size_t k = 0; k < n; ++k) {
        const uint32_t id = tokens.at(i + k);
        if (static_cast<int>(id) != window[k]) std::abort();
        max = std::max<int64_t>(max, id);
      }
    }
    const bool fits = max < INT32_MAX;
    if (fits) tokens.CheckBelow(static_cast<int>(max + 1));
    bool refused = false;
    try {
      tokens.CheckBelow(static_cast<int>(fits ? max : INT32_MAX));
    } catch (const cputrain::InputError&) {
      refused = true;
    }
    if (!refused) std::abort();
  } catch (const cputrain::InputError&) {
  }
  return 0;
}
