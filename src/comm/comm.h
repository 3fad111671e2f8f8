// Collectives between the replica groups of one process: reduce-scatter, allgather, allreduce,
// broadcast and barrier over G groups, each a pool of T_g worker threads (T_g may differ), through
// shared memory, lock-free. One file per collective (reduce_scatter.cc, allgather.cc, ...);
// this header is the communicator they share. The protocol, the determinism and NUMA arguments
// and the measurements are in docs/collectives.md.
//
// Usage (SPMD): every thread t of every group g calls the same collectives in the same order
// with the same n (and root), passing its group's own buffers; the communicator exchanges the
// pointers. All threads of a group pass identical arguments.
//
//   comm::Communicator comm({2, 2});          // 2 groups of 2 threads
//   // on thread t of group g, inside the group's WorkerPool::ForEachThread:
//   comm.Allreduce(g, t, grads[g], grads[g], n);  // in place
//
// Shard ownership: [0, n) is cut into G contiguous shards by ShardBounds(n, G, g), boundaries
// multiples of 16 floats (64 B). Group g owns shard g: reduce-scatter leaves the sum of shard g
// in group g's buffer, allgather reads shard h from group h. The trainer's ZeRO-1 optimizer uses
// the same partition.
//
// Thread-safety contract:
//  1. Each (group, thread) pair is driven by one OS thread at a time; the pairs of one
//     communicator call their collectives in the same order (the SPMD rule). A mismatch in op,
//     n, root or dtype is detected (best effort: at the first phase of the call) and throws
//     RuntimeError on every thread, aborting the communicator.
//  2. Happens-before: every collective is also a barrier. Everything any thread of any group did
//     before entering a collective happens-before everything any thread does after returning
//     from it; in particular everything the collective wrote into a group's output is visible to
//     all of that group's threads. So a group may read its whole output, and write any of its
//     buffers (send or recv) again, as soon as the call returns on its thread: no peer still
//     reads or writes them (contract 3).
//  3. Buffer lifetime: between a group's entry into a collective and its return, peers read the
//     group's send buffer (and, for allgather/allreduce, the owned shard of its recv buffer);
//     only the group's own threads write its buffers. Nothing is touched outside a call.
//  4. Buffers: out of place, send and recv must not overlap. Each group picks in place or out of
//     place for itself (the forms may differ between groups). No memory is allocated per call.
//  5. Failure: with CommOptions::timeout set, a wait longer than the timeout throws RuntimeError
//     naming the op and the group waited for, and aborts the communicator: every other waiting
//     thread wakes and throws too, and every later call throws. Abort() does the same on
//     request (e.g. when one group's thread failed). An aborted communicator must be destroyed;
//     its buffers' contents are unspecified.
//  6. Lifetime: the communicator may be destroyed once no thread is inside one of its calls.
//     After an abort, a peer's thread that had passed its last wait may still be reading a
//     group's buffers until it returns: free buffers only after every thread has left.
//
// Invariants of the protocol (what the implementation relies on, checked in comm_stress_test):
//  I1. progress[g] (one WaitWord per group, on its own cache line) counts the phase points that
//      the threads of group g have passed: each thread adds 1 at each. A collective has a fixed
//      number of phase points, so every thread of every group agrees on the global phase index p.
//  I2. A thread adds its phase point p+1 only after it has seen progress[g] >= p * T_g, i.e. after
//      all of its own group has passed p. So the threads of a group are never more than one phase
//      point apart, and progress[g] >= p * T_g holds exactly when all T_g threads passed p.
//  I3. A collective ends with every thread waiting for progress[h] >= p_last * T_h for every h it
//      could have been read by; hence invariant 3 above and the safe reuse of the group's slot
//      (its published pointers) in the next call.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/wait.h"

namespace cputrain::comm {

namespace internal {
class AbortState;
}

// Shard boundaries are multiples of this many elements (16 fp32 = one 64-byte cache line), so no
// two owners ever write the same cache line.
inline constexpr std::size_t kShardAlign = 16;

// A half-open element range [lo, hi).
struct Range {
  std::size_t lo = 0;
  std::size_t hi = 0;
  std::size_t size() const { return hi - lo; }
  bool empty() const { return hi <= lo; }
  bool operator==(const Range&) const = default;
};

// Shard g of the fixed partition of [0, n) into `groups` shards: boundary k is
// floor(k * n / groups) rounded down to a multiple of kShardAlign (boundary `groups` is n).
// Contiguous, covering, in order; shards differ in size by at most kShardAlign elements except
// the last, which also takes the n % kShardAlign tail. Small n leaves leading shards empty.
Range ShardBounds(std::size_t n, int groups, int g);

// The part `part` of `parts` of r, cut at multiples of kShardAlign (absolute indexes), for
// splitting one group's work between its threads. Parts may be empty.
Range SplitRange(Range r, int parts, int part);

// Element type of a payload. Only kF32 is implemented; the tag travels with every call (and is
// checked between groups) so that a bf16 payload with fp32 accumulation can be added in the
// kernels (comm/kernels.h) without changing the protocol.
enum class DType : uint8_t { kF32 = 0, kBF16 = 1 };
const char* DTypeName(DType t);

// See CommOptions::streaming_store_bytes. Measured on the 2-core Zen 3 box (32 MiB L3), G=2,
// allreduce busbw cached vs streaming stores over 4 alternating runs: 1 MiB 22-24 vs 9-14 GB/s,
// 4 MiB 20-31 vs 12-14, 16 MiB 4-8 vs 6-11, 32-256 MiB 2.8-3.8 vs 4.5-6.5 (docs/collectives.md).
// The crossover is where the G send + G recv buffers stop fitting in the last-level cache; on a
// machine with a much larger LLC per socket, set it to about LLC / 2.
inline constexpr std::size_t kDefaultStreamingStoreBytes = std::size_t{16} << 20;

struct CommOptions {
  // A wait longer than this throws RuntimeError and aborts the communicator (contract 5).
  // Zero = wait forever (training's default: a slow step is not an error). With a timeout, a
  // waiter that has spun SpinLimit() times polls with a sleep of at most 100 µs instead of
  // sleeping on the futex, because WaitWord has no timed wait; tests set one.
  std::chrono::nanoseconds timeout{0};
  // Collectives on buffers of at least this many bytes (n * 4) write their outputs with
  // non-temporal stores (kernels.h StoreHint::kStreaming); 0 = never. Default from the
  // measurement in docs/collectives.md.
  std::size_t streaming_store_bytes = kDefaultStreamingStoreBytes;
};

class Communicator {
 public:
  // threads_per_group[g] = T_g >= 1 worker threads of group g; G = threads_per_group.size() >= 1.
  explicit Communicator(std::vector<int> threads_per_group, CommOptions options = {});
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int groups() const { return static_cast<int>(threads_per_group_.size()); }
  int threads(int group) const { return threads_per_group_[static_cast<std::size_t>(group)]; }
  const CommOptions& options() const { return options_; }

  // Each group's send[0, n) summed over groups (order 0, 1, ..., G-1); group g receives its shard
  // s = ShardBounds(n, G, g): out of place into recv[0, s.size()); in place (recv == send) into
  // send[s.lo, s.hi), the rest of send left unchanged.
  void ReduceScatter(int group, int thread, const float* send, float* recv, std::size_t n);

  // Group h's shard (send[0, s_h.size()), s_h = ShardBounds(n, G, h)) lands at recv[s_h.lo ..]
  // of every group. In place when send == recv + s_g.lo (the shard already at its offset).
  void Allgather(int group, int thread, const float* send, float* recv, std::size_t n);

  // recv[0, n) = sum over groups of send[0, n) (order 0, 1, ..., G-1), in every group; in place
  // when recv == send. Reduce-scatter then allgather, fused: each owner reduces its shard into
  // its own recv, then every group pulls the other shards.
  void Allreduce(int group, int thread, const float* send, float* recv, std::size_t n);

  // recv[0, n) = root's send[0, n) in every group. `send` is read on the root only (others may
  // pass nullptr); in place on the root when recv == send.
  void Broadcast(int group, int thread, int root, const float* send, float* recv, std::size_t n);

  // Returns once every thread of every group has entered this barrier; orders every thread's
  // prior writes before every thread's subsequent reads.
  void Barrier(int group, int thread);

  // Makes every waiting and future call throw RuntimeError("... aborted: <reason>"). Safe from
  // any thread, at any time, more than once (the first reason is kept).
  void Abort(const std::string& reason);
  bool aborted() const;

  // Implementation types, public only so that the per-collective files can share them.
  enum class Op : uint8_t { kReduceScatter, kAllgather, kAllreduce, kBroadcast, kBarrier };
  struct Call;

 private:
  struct GroupState;
  struct ThreadState;

  // --- the phase protocol (communicator.cc) ---
  // Publishes the caller's arguments in its group's slot (thread 0 only) before phase 1.
  void Begin(const Call& call);
  // Adds the caller's phase point to progress[group] (invariant I1); returns its index p.
  uint32_t Arrive(const Call& call);
  // Waits until every thread of group h has passed phase point p (progress[h] >= p * T_h).
  void WaitPhase(const Call& call, int h, uint32_t p, const char* phase_name);
  void WaitAllPhase(const Call& call, uint32_t p, const char* phase_name);
  // Group h's published arguments for this call, after checking that they match the caller's.
  const Call& Peer(const Call& call, int h);
  [[noreturn]] void ThrowAborted(const Call& call);
  // Out of place, send[0, send_elems) and recv[0, recv_elems) must not overlap.
  void CheckBuffers(const Call& call, std::size_t send_elems, std::size_t recv_elems);

  // --- the collectives, one file each ---
  void RunReduceScatter(Call& call);
  void RunAllgather(Call& call);
  void RunAllreduce(Call& call);
  void RunBroadcast(Call& call);
  void RunBarrier(Call& call);

  ThreadState& State(int group, int thread);
  Call MakeCall(Op op, int group, int thread, int root, DType dtype, const void* send, void* recv,
                std::size_t n);

  const std::vector<int> threads_per_group_;
  const CommOptions options_;
  std::unique_ptr<GroupState[]> group_state_;    // G entries, each on its own cache lines
  std::unique_ptr<ThreadState[]> thread_state_;  // sum T_g entries, each on its own cache line
  std::vector<std::size_t> thread_offset_;       // thread_state_ index of (g, 0)

  std::unique_ptr<internal::AbortState> abort_;
};

// A collective's arguments as one group's thread passed them (and as thread 0 publishes them in
// the group's slot for the peers).
struct Communicator::Call {
  Op op = Op::kBarrier;
  DType dtype = DType::kF32;
  int group = 0;
  int thread = 0;
  int root = 0;
  std::size_t n = 0;
  const void* send = nullptr;
  void* recv = nullptr;
  uint64_t seq = 0;  // how many collectives this thread called before this one
};

const char* OpName(Communicator::Op op);

}  // namespace cputrain::comm
