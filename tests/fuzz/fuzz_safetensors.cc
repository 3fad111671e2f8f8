// Fuzz target: the safetensors reader (src/model/safetensors.h), on the input as a file.
//
// An accepted header must tile the data section exactly (each tensor's span is its shape times
// its dtype's size, consecutive from 0 to the end of the file), so reading every F32, BF16 and
// F16 tensor stays inside the file and allocates at most the file's size in floats. A rejection
// is an InputError; anything else (bad_alloc, RuntimeError, a sanitizer report) is a finding.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/error.h"
#include "fuzz_util.h"
#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  cputrain::fuzz::MemFile file(data, size);
  try {
    auto st = cputrain::model::SafetensorsFile::Open(file.path());
    std::uint64_t covered = 0;
    for (const cputrain::model::SafeTensor& t : st.tensors()) {
      if (t.begin != covered || t.end > size) __builtin_trap();  // not tiled: a reader bug
      covered = t.end;
      std::vector<float> out(t.numel);
      try {
        st.ReadF32(t, out.data());
      } catch (const cputrain::InputError&) {  // a dtype other than F32/BF16/F16
      }
    }
  } catch (const cputrain::InputError&) {
  }
  return 0;
}
