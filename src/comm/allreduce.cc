// Allreduce = reduce-scatter + allgather, fused into one call with three phase points.
//
// Phases (see comm.h invariants I1-I3):
//   arrive  every thread: publish (thread 0: the slot), add p1, wait for all groups at p1
//   reduce  the owner's threads sum their part of the own shard into their own recv, reading each
//           group's send once (remote reads, local writes); then add p2
//   gather  for each other group h (going round from the next one), wait for h at p2 and pull
//           h's reduced shard from h's recv into ours. The per-owner wait both makes h's shard
//           final and, in place, guarantees h has finished reading our old values in that
//           region (our recv is our send), so the copy may overwrite them. Then add p3
//   leave   wait for all groups at p3: nobody reads our buffers any more
#include "comm/comm.h"
#include "comm/internal.h"

namespace cputrain::comm {

void Communicator::Allreduce(int group, int thread, const float* send, float* recv, std::size_t n) {
  Call c = MakeCall(Op::kAllreduce, group, thread, 0, DType::kF32, send, recv, n);
  RunAllreduce(c);
}

void Communicator::RunAllreduce(Call& c) {
  const int G = groups(), T = threads(c.group);
  CheckBuffers(c, c.n, c.n);
  Begin(c);
  const uint32_t p1 = Arrive(c);
  WaitAllPhase(c, p1, "arrive");

  ThreadState& me = State(c.group, c.thread);
  for (int h = 0; h < G; ++h) {
    const Call& peer = Peer(c, h);
    me.sends[h] = static_cast<const float*>(peer.send);
    me.recvs[h] = static_cast<float*>(peer.recv);
  }
  float* recv = static_cast<float*>(c.recv);
  const Range own = ShardBounds(c.n, G, c.group);
  const Range mine = SplitRange(own, T, c.thread);
  const StoreHint hint = OutputHint(options_, c.n);
  if (!mine.empty()) SumIntoAt(recv + mine.lo, me.sends.get(), G, mine.lo, mine.size(), hint);

  const uint32_t p2 = Arrive(c);
  WaitPhase(c, c.group, p2, "reduce");  // invariant I2 before the next add
  for (int k = 1; k < G; ++k) {
    const int h = (c.group + k) % G;
    const Range part = SplitRange(ShardBounds(c.n, G, h), T, c.thread);
    if (part.empty()) continue;
    WaitPhase(c, h, p2, "reduce");
    CopyPart(recv + part.lo, me.recvs[h] + part.lo, part.size(), hint);
  }

  const uint32_t p3 = Arrive(c);
  WaitAllPhase(c, p3, "gather");
}

}  // namespace cputrain::comm
