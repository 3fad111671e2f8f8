// Barrier: one phase point; every thread adds it and waits for all groups to reach it. The adds
// are releases and the waits acquires (comm.h contract 2), so every write before the barrier on
// any thread happens-before every read after it on any thread.
#include "comm/comm.h"
#include "comm/internal.h"

namespace cputrain::comm {

void Communicator::Barrier(int group, int thread) {
  Call c = MakeCall(Op::kBarrier, group, thread, 0, DType::kF32, nullptr, nullptr, 0);
  RunBarrier(c);
}

void Communicator::RunBarrier(Call& c) {
  Begin(c);
  const uint32_t p1 = Arrive(c);
  WaitAllPhase(c, p1, "arrive");
  // No Peer() check here: with a single phase point, a peer that is through the barrier may
  // already be writing its slot for its next call, so reading slots now would race. The slot
  // written in Begin still lets a peer that called another collective here detect the mismatch.
}

}  // namespace cputrain::comm
