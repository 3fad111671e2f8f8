// Broadcast: every group copies the root's buffer into its own.
//
// Phases (see comm.h invariants I1-I3):
//   arrive  every thread: publish (thread 0: the slot), add p1, wait for its own group (I2) and
//           the root at p1; nobody needs the other groups' pointers
//   copy    each group's threads pull their part of root's send into their own recv (remote
//           reads, local writes); then add p2
//   leave   wait for all groups at p2: the root's send is no longer read
#include <fmt/format.h>

#include "comm/comm.h"
#include "comm/internal.h"
#include "common/error.h"

namespace cputrain::comm {

void Communicator::Broadcast(int group, int thread, int root, const float* send, float* recv,
                             std::size_t n) {
  Call c = MakeCall(Op::kBroadcast, group, thread, root, DType::kF32, send, recv, n);
  RunBroadcast(c);
}

void Communicator::RunBroadcast(Call& c) {
  CPUTRAIN_CHECK(c.root >= 0 && c.root < groups(),
                 fmt::format("Broadcast: root {} is not in [0, {})", c.root, groups()));
  CheckBuffers(c, c.group == c.root ? c.n : 0, c.n);
  Begin(c);
  const uint32_t p1 = Arrive(c);
  WaitPhase(c, c.group, p1, "arrive");
  WaitPhase(c, c.root, p1, "arrive");
  Peer(c, c.group);  // the group's threads agree on their buffers
  const float* src = static_cast<const float*>(Peer(c, c.root).send);

  const Range part = SplitRange(Range{0, c.n}, threads(c.group), c.thread);
  if (!part.empty()) {
    CopyPart(static_cast<float*>(c.recv) + part.lo, src + part.lo, part.size(),
             OutputHint(options_, c.n));
  }

  const uint32_t p2 = Arrive(c);
  WaitAllPhase(c, p2, "copy");
}

}  // namespace cputrain::comm
