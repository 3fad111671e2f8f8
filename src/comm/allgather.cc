// Allgather: every group ends with every group's shard at its offset in its own recv buffer.
//
// Phases (see comm.h invariants I1-I3):
//   arrive  every thread: publish (thread 0: the slot), add p1, wait for all groups at p1
//   gather  each group's threads pull every shard into their own recv (remote reads, local
//           writes), starting with their own group and going round, so that at any moment the G
//           groups read from different owners rather than all from group 0; then add p2
//   leave   wait for all groups at p2: nobody reads our shard any more, our recv is complete
#include "comm/comm.h"
#include "comm/internal.h"

namespace cputrain::comm {

void Communicator::Allgather(int group, int thread, const float* send, float* recv, std::size_t n) {
  Call c = MakeCall(Op::kAllgather, group, thread, 0, DType::kF32, send, recv, n);
  RunAllgather(c);
}

void Communicator::RunAllgather(Call& c) {
  const int G = groups(), T = threads(c.group);
  CheckBuffers(c, ShardBounds(c.n, G, c.group).size(), c.n);
  Begin(c);
  const uint32_t p1 = Arrive(c);
  WaitAllPhase(c, p1, "arrive");

  ThreadState& me = State(c.group, c.thread);
  for (int h = 0; h < G; ++h) me.sends[h] = static_cast<const float*>(Peer(c, h).send);
  float* recv = static_cast<float*>(c.recv);
  const StoreHint hint = OutputHint(options_, c.n);
  for (int k = 0; k < G; ++k) {
    const int h = (c.group + k) % G;
    const Range shard = ShardBounds(c.n, G, h);
    const Range part = SplitRange(shard, T, c.thread);
    if (part.empty()) continue;
    // Group h's send is its shard alone; in place it is recv + shard.lo and the own copy is a
    // no-op (Copy with dst == src).
    CopyPart(recv + part.lo, me.sends[h] + (part.lo - shard.lo), part.size(), hint);
  }

  const uint32_t p2 = Arrive(c);
  WaitAllPhase(c, p2, "gather");
}

}  // namespace cputrain::comm
