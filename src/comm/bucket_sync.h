// BucketSync: the building blocks for syncing gradients bucket by bucket while backward still
// runs (the trainer builds its overlap on top). Each group registers one buffer of n floats
// (its gradients) once; the buffer is cut into the fixed shard partition (comm.h ShardBounds:
// group g owns shard g, ZeRO-1's partition) and, independently, into buckets [lo, hi) that the
// trainer chooses (B buckets per step, e.g. a few layers each). Per group and per stage there is
// one WaitWord counting the buckets that group has published; owners wait on them.
//
// Protocol for step s, bucket b (every group, buckets in the order 0, 1, ..., B-1 each step):
//   1. Group g's threads finish writing bucket b of its buffer; after they have joined, ONE
//      thread of g calls Publish(kWritten, g, s, b).
//   2. Owner h: WaitAll(kWritten, s, b), then its threads (any number of them, `parts`, the
//      caller's choice) call ReduceScatterRange(h, r, part, parts): the part of bucket r inside
//      h's shard becomes the sum over groups (order 0..G-1) in h's own buffer (reads each group's
//      buffer once, writes its own). After they joined, ONE thread calls
//      Publish(kReduced, h, s, b).
//   3. Optional (gradients wanted everywhere): group g: WaitAll(kReduced, s, b), then
//      AllgatherRange(g, r, part, parts) pulls the owners' reduced parts of r into g's buffer;
//      after the join, ONE thread calls Publish(kGathered, g, s, b).
//
// Thread-safety contract:
//  1. Register(g, buf) is called once per group, before group g's first Publish. Peers read the
//     pointer only after acquiring one of g's stage words, which g released after registering.
//  2. Each (stage, group) word has one publisher at a time, and buckets are published in order:
//     s*B + b must be exactly the number published before (checked: RuntimeError otherwise).
//     Publish is a release (WaitWord::Add, seq_cst); Wait/WaitAll are acquires. So everything a
//     group's threads wrote before the publishing thread's join (the join orders them before
//     Publish) happens-before everything any thread does after a Wait that covers it.
//  3. The invariant that says when a group may overwrite its buffer again: region r of group
//     g's buffer is read by peers (a) in step 2, by every owner whose shard intersects r, until
//     that owner publishes kReduced for (s, b), and (b) if step 3 is used, the part of r inside
//     g's own shard is read by every other group until it publishes kGathered for (s, b).
//     Hence group g may write bucket b for step s+1 (zero it, accumulate into it) only after
//     WaitAll(kReduced, s, b) — or WaitAll(kGathered, s, b) when step 3 is used. Steps 2 and 3
//     write only the caller's own buffer, so they never race with each other.
//  4. ReduceScatterRange / AllgatherRange read peers' buffers without waiting: the caller must
//     have done the WaitAll of the stage before (steps 2 and 3). The `parts` callers of one range
//     call write disjoint, cache-line-aligned pieces.
//  5. With CommOptions::timeout, a Wait longer than it throws RuntimeError and aborts: every
//     waiter wakes and throws, and so does every later call. Abort() does it on request.
//  6. Counters are 32-bit and compared in serial order: waiters must never lag a publisher by
//     2^31 buckets (the protocol keeps them within one step).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "comm/comm.h"

namespace cputrain::comm {

class BucketSync {
 public:
  enum class Stage : uint8_t { kWritten = 0, kReduced = 1, kGathered = 2 };
  static constexpr int kStages = 3;

  // `groups` groups, buffers of n floats, buckets_per_step >= 1 buckets per step.
  BucketSync(int groups, std::size_t n, int buckets_per_step, CommOptions options = {});
  ~BucketSync();
  BucketSync(const BucketSync&) = delete;
  BucketSync& operator=(const BucketSync&) = delete;

  int groups() const { return groups_; }
  std::size_t size() const { return n_; }
  int buckets_per_step() const { return buckets_; }
  // The shard group g owns (ShardBounds(size(), groups(), g)).
  Range Owned(int group) const { return ShardBounds(n_, groups_, group); }

  // Contract 1. buffer holds size() floats and outlives every use.
  void Register(int group, float* buffer);

  // Step 2: the part `part` of `parts` of (r ∩ Owned(group)) := sum over groups of it, in
  // group's own buffer.
  void ReduceScatterRange(int group, Range r, int part, int parts);
  // Step 3: the part `part` of `parts` of (r minus Owned(group)) := the owners' values.
  void AllgatherRange(int group, Range r, int part, int parts);

  // Group `group` has finished `stage` for bucket b of step s (contract 2).
  void Publish(Stage stage, int group, uint64_t step, int bucket);
  // Waits until group `group` has published `stage` for bucket b of step s.
  void Wait(Stage stage, int group, uint64_t step, int bucket);
  // Waits until every group has.
  void WaitAll(Stage stage, uint64_t step, int bucket);
  // Without waiting: true if every group has published `stage` for bucket b of step s. An
  // acquire like WaitAll when it returns true (so the caller may then read the buckets), so a
  // caller can do other work instead of waiting for the slowest group.
  bool AllPublished(Stage stage, uint64_t step, int bucket) const;

  void Abort(const std::string& reason);
  bool aborted() const;

 private:
  struct Words;
  uint32_t Count(uint64_t step, int bucket) const;  // s*B + b, mod 2^32
  const WaitWord& Word(Stage stage, int group) const;
  void CheckGroup(int group, const char* what) const;

  const int groups_;
  const std::size_t n_;
  const int buckets_;
  const CommOptions options_;
  std::unique_ptr<Words[]> words_;     // one per group: its kStages counters
  std::unique_ptr<float*[]> buffers_;  // registered buffers (each written once, by its group)
  std::unique_ptr<internal::AbortState> abort_;
};

const char* StageName(BucketSync::Stage stage);

}  // namespace cputrain::comm
