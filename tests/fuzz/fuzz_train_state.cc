// Fuzz target: the state.bin reader (src/train/train_state.h), on the input as a file: its
// header, meta, the optimizer's slot records (version 4) and the slots themselves. A file the
// reader accepts describes exactly its bytes, so reading every slot whole — the records given
// back to CheckSlots, then ReadSlots into buffers of the recorded sizes — stays inside it. A
// rejection is an InputError; any other exception (std::bad_alloc from slot sizes that ask for
// terabytes, RuntimeError, a failed check) is a finding.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/error.h"
#include "fuzz_util.h"
#include "optim/optimizer.h"
#include "train/train_state.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  cputrain::fuzz::MemFile file(data, size);
  try {
    cputrain::train::TrainStateReader r(file.path());
    r.VerifyChecksum();
    std::vector<cputrain::optim::Slot> slots;
    for (const auto& rec : r.slots())
      slots.push_back({rec.name, rec.floats, rec.floats, {{0, 0, rec.floats}}});
    r.CheckSlots(r.optimizer(), slots);
    std::vector<std::vector<float>> state;
    std::vector<float*> out;
    for (const auto& slot : slots) out.push_back(state.emplace_back(slot.full).data());
    r.ReadSlots(slots, out);
  } catch (const cputrain::InputError&) {
  }
  return 0;
}
