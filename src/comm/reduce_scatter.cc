// Reduce-scatter: each group ends with the sum over all groups of its own shard.
//
// Phases (p1, p2 are this call's phase points, see comm.h invariants I1-I3):
//   arrive  every thread: publish (thread 0: the slot), add p1, wait for all groups at p1
//   reduce  the owner's threads sum their part of the own shard, reading each group's send once
//           (remote reads) and writing the own buffer (local write), then add p2
//   leave   wait for all groups at p2: nobody reads our send any more (we may reuse it), and
//           our whole shard is written (every thread of the group may read it)
#include "comm/comm.h"
#include "comm/internal.h"

namespace cputrain::comm {

void Communicator::ReduceScatter(int group, int thread, const float* send, float* recv,
                                 std::size_t n) {
  Call c = MakeCall(Op::kReduceScatter, group, thread, 0, DType::kF32, send, recv, n);
  RunReduceScatter(c);
}

void Communicator::RunReduceScatter(Call& c) {
  const int G = groups();
  const Range own = ShardBounds(c.n, G, c.group);
  CheckBuffers(c, c.n, own.size());
  Begin(c);
  const uint32_t p1 = Arrive(c);
  WaitAllPhase(c, p1, "arrive");

  ThreadState& me = State(c.group, c.thread);
  for (int h = 0; h < G; ++h) me.sends[h] = static_cast<const float*>(Peer(c, h).send);
  const Range part = SplitRange(own, threads(c.group), c.thread);
  if (!part.empty()) {
    float* recv = static_cast<float*>(c.recv);
    // In place the sum lands in send's own shard (dst aliases source `group`, which SumInto
    // allows; peers never read that region). Out of place recv holds just the shard.
    float* dst = c.recv == c.send ? recv + part.lo : recv + (part.lo - own.lo);
    SumIntoAt(dst, me.sends.get(), G, part.lo, part.size(), OutputHint(options_, c.n));
  }

  const uint32_t p2 = Arrive(c);
  WaitAllPhase(c, p2, "reduce");
}

}  // namespace cputrain::comm
