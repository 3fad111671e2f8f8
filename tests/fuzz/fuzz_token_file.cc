// Fuzz target: the token-file reader (data::TokenFile, src/data/token_file.h), on the input as a
// file. A file it accepts must hold exactly the header's count of tokens: every one is read
// (under ASan a read past the mapping is a finding), and CheckBelow must find the largest.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "common/error.h"
#include "data/token_file.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  cputrain::fuzz::MemFile file(data, size);
  try {
    cputrain::data::TokenFile tokens = cputrain::data::TokenFile::Open(file.path());
    if (tokens.size() == 0 || cputrain::data::kTokenFileHeaderBytes + 2 * tokens.size() != size) {
      std::abort();  // Open promises a non-empty file whose size matches its header
    }
    // Reads every token; CheckBelow must accept the largest id + 1 and refuse the largest id.
    int max = 0;
    for (std::size_t i = 0; i < tokens.size(); ++i) max = std::max<int>(max, tokens.data()[i]);
    tokens.CheckBelow(max + 1);
    bool refused = false;
    try {
      tokens.CheckBelow(max);
    } catch (const cputrain::InputError&) {
      refused = true;
    }
    if (!refused) std::abort();
  } catch (const cputrain::InputError&) {
  }
  return 0;
}
