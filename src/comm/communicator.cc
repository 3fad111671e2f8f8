// The communicator's shared machinery: the shard partition, per-group and per-thread state, the
// phase protocol (Begin / Arrive / WaitPhase / Peer) and abort. The collectives themselves live
// one per file (reduce_scatter.cc, allgather.cc, allreduce.cc, broadcast.cc, barrier.cc).
#include <fmt/format.h>

#include <algorithm>
#include <new>

#include "comm/comm.h"
#include "comm/internal.h"
#include "common/error.h"

namespace cputrain::comm {

Range ShardBounds(std::size_t n, int groups, int g) {
  CPUTRAIN_CHECK(groups >= 1 && g >= 0 && g < groups, "ShardBounds: group index out of range");
  const std::size_t G = static_cast<std::size_t>(groups);
  // floor(k * n / G) without overflowing k * n: n = q * G + r, so k * n / G = k * q + k * r / G
  // with k * r < G^2.
  auto boundary = [&](std::size_t k) -> std::size_t {
    if (k == G) return n;
    const std::size_t exact = k * (n / G) + k * (n % G) / G;
    return exact - exact % kShardAlign;
  };
  return Range{boundary(static_cast<std::size_t>(g)), boundary(static_cast<std::size_t>(g) + 1)};
}

Range SplitRange(Range r, int parts, int part) {
  if (r.empty()) return Range{r.lo, r.lo};
  const std::size_t P = static_cast<std::size_t>(parts), len = r.size();
  auto cut = [&](std::size_t k) -> std::size_t {
    if (k == 0) return r.lo;
    if (k == P) return r.hi;
    std::size_t c = r.lo + k * (len / P) + k * (len % P) / P;
    c -= c % kShardAlign;  // absolute index: 64-byte aligned when the base pointer is
    return std::max(c, r.lo);
  };
  const std::size_t p = static_cast<std::size_t>(part);
  return Range{cut(p), std::max(cut(p), cut(p + 1))};
}

const char* DTypeName(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kBF16:
      return "bf16";
  }
  return "?";
}

const char* OpName(Communicator::Op op) {
  switch (op) {
    case Communicator::Op::kReduceScatter:
      return "ReduceScatter";
    case Communicator::Op::kAllgather:
      return "Allgather";
    case Communicator::Op::kAllreduce:
      return "Allreduce";
    case Communicator::Op::kBroadcast:
      return "Broadcast";
    case Communicator::Op::kBarrier:
      return "Barrier";
  }
  return "?";
}

Communicator::Communicator(std::vector<int> threads_per_group, CommOptions options)
    : threads_per_group_(std::move(threads_per_group)),
      options_(options),
      abort_(std::make_unique<internal::AbortState>()) {
  if (threads_per_group_.empty()) throw InputError("a communicator needs at least one group");
  std::size_t total = 0;
  for (std::size_t g = 0; g < threads_per_group_.size(); ++g) {
    if (threads_per_group_[g] < 1) {
      throw InputError(fmt::format("communicator group {} has {} threads; each needs at least 1", g,
                                   threads_per_group_[g]));
    }
    thread_offset_.push_back(total);
    total += static_cast<std::size_t>(threads_per_group_[g]);
  }
  const std::size_t G = threads_per_group_.size();
  group_state_ = std::make_unique<GroupState[]>(G);
  thread_state_ = std::make_unique<ThreadState[]>(total);
  for (std::size_t i = 0; i < total; ++i) thread_state_[i].Init(G);
}

Communicator::~Communicator() = default;

Communicator::ThreadState& Communicator::State(int group, int thread) {
  return thread_state_[thread_offset_[static_cast<std::size_t>(group)] +
                       static_cast<std::size_t>(thread)];
}

Communicator::Call Communicator::MakeCall(Op op, int group, int thread, int root, DType dtype,
                                          const void* send, void* recv, std::size_t n) {
  CPUTRAIN_CHECK(group >= 0 && group < groups(),
                 fmt::format("{}: group {} is not in [0, {})", OpName(op), group, groups()));
  CPUTRAIN_CHECK(thread >= 0 && thread < threads(group),
                 fmt::format("{}: thread {} is not in [0, {}) for group {}", OpName(op), thread,
                             threads(group), group));
  // Only fp32 is implemented (comm.h DType); the public entry points pass nothing else yet.
  CPUTRAIN_CHECK(dtype == DType::kF32,
                 fmt::format("{}: {} payloads are not implemented", OpName(op), DTypeName(dtype)));
  ThreadState& me = State(group, thread);
  Call c;
  c.op = op;
  c.dtype = dtype;
  c.group = group;
  c.thread = thread;
  c.root = root;
  c.n = n;
  c.send = send;
  c.recv = recv;
  c.seq = me.calls++;
  if (abort_->IsSet()) ThrowAborted(c);
  return c;
}

void Communicator::Begin(const Call& c) {
  // Plain store into the slot: no peer reads it now (invariant I3: they finished reading the
  // previous call's slot before this group could leave that call), and the release of this
  // thread's Arrive below publishes it to every peer that acquires progress[group] >= p * T_g.
  if (c.thread == 0) group_state_[static_cast<std::size_t>(c.group)].slot = c;
}

uint32_t Communicator::Arrive(const Call& c) {
  ThreadState& me = State(c.group, c.thread);
  ++me.phase;
  // WaitWord::Add is a seq_cst read-modify-write, hence a release: every write this thread made
  // before (its part of the output, thread 0's slot) happens-before any thread whose acquire
  // load sees progress[group] >= p * T_g. The adds of the group's T_g threads form one release
  // sequence, so that load synchronizes with all of them, not only with the last.
  group_state_[static_cast<std::size_t>(c.group)].progress.Add(1);
  return me.phase;
}

void Communicator::WaitPhase(const Call& c, int h, uint32_t p, const char* phase_name) {
  const WaitWord& word = group_state_[static_cast<std::size_t>(h)].progress;
  const uint32_t th = static_cast<uint32_t>(threads(h));
  const uint32_t target = p * th;  // wraps with the counter (serial-number comparison)
  switch (internal::WaitAtLeast(word, target, options_.timeout, *abort_)) {
    case internal::WaitResult::kReached:
      return;
    case internal::WaitResult::kAborted:
      ThrowAborted(c);
    case internal::WaitResult::kTimedOut: {
      // By invariant I2 the counter is within one phase of the target, so this count is exact.
      const uint32_t v = word.Load();
      const int32_t here = static_cast<int32_t>(v - (p - 1) * th);
      const std::string msg = fmt::format(
          "{} #{} (group {} thread {}, n={}): waited {} in phase '{}' for group {}, of whose {} "
          "threads {} arrived",
          OpName(c.op), c.seq, c.group, c.thread, c.n, internal::FormatDuration(options_.timeout),
          phase_name, h, th, std::clamp<int32_t>(here, 0, static_cast<int32_t>(th)));
      Abort("timeout: " + msg);
      throw RuntimeError("comm: " + msg,
                         "every thread of every group must call the same collectives in the same "
                         "order; a group that stopped calling them (an exception, an early "
                         "return) leaves the others waiting");
    }
  }
}

void Communicator::WaitAllPhase(const Call& c, uint32_t p, const char* phase_name) {
  for (int h = 0; h < groups(); ++h) WaitPhase(c, h, p, phase_name);
}

const Communicator::Call& Communicator::Peer(const Call& c, int h) {
  // Plain read of group h's slot: the caller has waited for progress[h] >= p1 * T_h (acquire),
  // which includes thread 0 of group h's phase-1 add, made after it wrote the slot.
  const Call& peer = group_state_[static_cast<std::size_t>(h)].slot;
  const bool same_call = peer.op == c.op && peer.n == c.n && peer.dtype == c.dtype &&
                         peer.root == c.root && peer.seq == c.seq;
  const bool same_args = h != c.group || (peer.send == c.send && peer.recv == c.recv);
  if (!same_call || !same_args) {
    const std::string msg =
        !same_call
            ? fmt::format(
                  "collective mismatch: group {} thread {} called {}(n={}, root={}, {}) "
                  "as call #{}, but group {} called {}(n={}, root={}, {}) as call #{}",
                  c.group, c.thread, OpName(c.op), c.n, c.root, DTypeName(c.dtype), c.seq, h,
                  OpName(peer.op), peer.n, peer.root, DTypeName(peer.dtype), peer.seq)
            : fmt::format("{} #{}: thread {} of group {} passed other buffers than its thread 0",
                          OpName(c.op), c.seq, c.thread, c.group);
    Abort(msg);
    throw RuntimeError("comm: " + msg,
                       "every thread of every group must call the same collectives in the same "
                       "order, with the same n and root; the threads of a group pass the same "
                       "buffers");
  }
  return peer;
}

void Communicator::Abort(const std::string& reason) {
  if (!abort_->Set(reason)) return;
  // Wake every waiter (sync.h, "Abort protocol"): the add comes after the flag's release store.
  for (int h = 0; h < groups(); ++h) {
    group_state_[static_cast<std::size_t>(h)].progress.Add(internal::kPoison);
  }
}

bool Communicator::aborted() const { return abort_->IsSet(); }

void Communicator::ThrowAborted(const Call& c) {
  throw RuntimeError(fmt::format("comm: {} #{} (group {} thread {}): communicator aborted: {}",
                                 OpName(c.op), c.seq, c.group, c.thread, abort_->reason()));
}

void Communicator::CheckBuffers(const Call& c, std::size_t send_elems, std::size_t recv_elems) {
  if (c.send == nullptr || c.recv == nullptr || c.send == c.recv) return;
  const char* s = static_cast<const char*>(c.send);
  const char* r = static_cast<const char*>(c.recv);
  const std::size_t sb = send_elems * sizeof(float), rb = recv_elems * sizeof(float);
  const bool overlap = s < r + rb && r < s + sb;
  // Allgather in place passes send inside recv: that is the one allowed overlap.
  const bool allgather_in_place =
      c.op == Op::kAllgather && s == r + ShardBounds(c.n, groups(), c.group).lo * sizeof(float);
  CPUTRAIN_CHECK(
      !overlap || allgather_in_place,
      fmt::format("{}: send and recv overlap without being the in-place form", OpName(c.op)));
}

}  // namespace cputrain::comm
