// Fuzz target: the llm.c checkpoint reader (src/model/checkpoint.h), on the input as a file.
//
// A header the reader accepts must describe exactly the file's bytes, so the load that follows
// reads every tensor without running off the end, into a buffer of ParamLayout::total() floats.
// A rejection is an InputError; any other exception (std::bad_alloc from a header that asks for
// terabytes, RuntimeError) is a finding.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/error.h"
#include "fuzz_util.h"
#include "model/checkpoint.h"
#include "model/transformer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  cputrain::fuzz::MemFile file(data, size);
  try {
    const cputrain::model::Shape shape = cputrain::model::ReadCheckpointShape(file.path());
    const cputrain::model::ParamLayout layout(shape);
    std::vector<float> params(layout.total());
    cputrain::model::LoadCheckpoint(file.path(), layout, params.data());
  } catch (const cputrain::InputError&) {
  }
  return 0;
}
