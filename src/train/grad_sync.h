// GradSync: data-parallel gradient synchronisation between the replica groups of one process,
// bucket by bucket while backward is still running, leaving each group with the global sum of
// the shard of the gradient it owns (ZeRO-1: it then updates that shard alone).
//
// With a comm::Distributed (multi-node), each owner then allreduces its part of the bucket with the
// same group of every other process before it marks the bucket reduced: intra-node
// reduce-scatter, inter-node allreduce of the shard, overlapped with backward in the same way.
//
// Buckets follow backward's completion order. Backward reports that the suffix [from, total) of
// the flat gradient is final (model.h: after lnf, after each block, after the embeddings); the
// suffix between two reports is cut into buckets of about bucket_floats (a multi-block range
// when blocks are small, several buckets for one big tensor such as wte), numbered in the order
// they complete. The shard partition is comm::ShardBounds (the same as the optimizer's).
//
// Two ways to do the reductions, with identical results (the same sums in the same order):
//  - inline (no comm threads): at each report the group publishes the buckets it has written,
//    then its own workers reduce its owned part of every earlier bucket that all groups have
//    written by now — without waiting for the others — and backward goes on; what is left is
//    reduced in FinishStep. (Waiting at every bucket made the faster group idle once per
//    bucket: on 2 groups x 1 thread that cost more than the reductions themselves.)
//  - comm threads (placement.comm_threads >= 1): a pinned communication pool per group reduces
//    each bucket as soon as every group has written it, while the compute workers go on with
//    backward (the overlap DDP gets from its buckets).
//
// Thread-safety contract: OnBackwardReady / FinishStep for group g are called by group g's
// driver (worker 0 of its pool) only, steps in order 0, 1, 2, ...; BeginStep(g, s) before the
// step's first OnBackwardReady. Abort may be called from any thread. After FinishStep(g, s)
// returns, group g's owned shard of its gradient buffer holds the sum over groups, and every
// group has finished reading group g's buffer for step s (so the next step may overwrite it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/bucket_sync.h"
#include "comm/comm.h"
#include "comm/distributed.h"
#include "common/wait.h"
#include "model/transformer.h"
#include "runtime/worker_pool.h"

namespace cputrain::train {

class GradSync {
 public:
  // pools[g]: group g's compute pool; comm_pools[g]: its communication pool, or empty for the
  // inline mode; grads[g]: its gradient buffer (layout.total() floats). dist: the other
  // processes of a multi-node run (each owned part is then allreduced across them), or null.
  GradSync(const model::ParamLayout& layout, std::vector<WorkerPool*> pools,
           std::vector<WorkerPool*> comm_pools, std::vector<float*> grads,
           std::size_t bucket_floats, comm::Distributed* dist = nullptr);
  ~GradSync();
  GradSync(const GradSync&) = delete;
  GradSync& operator=(const GradSync&) = delete;

  int groups() const { return static_cast<int>(pools_.size()); }
  comm::Range Owned(int group) const { return comm::ShardBounds(total_, groups(), group); }

  void BeginStep(int group, uint64_t step);
  // From model::Backward's on_ready: grads[group][from, total) are final.
  void OnBackwardReady(int group, uint64_t step, std::size_t from);
  void FinishStep(int group, uint64_t step);

  // Wakes every waiter with an error (a group failed); later calls throw.
  void Abort(const std::string& reason);

 private:
  // Reduces group's owned part of bucket b (all groups must have written it) and publishes it.
  void ReduceBucket(int group, WorkerPool& pool, uint64_t step, int bucket);
  void CommLoop(int group);

  const std::size_t total_;
  std::vector<WorkerPool*> pools_, comm_pools_;
  std::vector<float*> grads_;
  comm::Distributed* dist_;
  std::vector<comm::Range> buckets_;  // in completion order: buckets_[0] ends at total_
  comm::BucketSync sync_;
  std::vector<int> next_bucket_;  // per group, owned by its driver: first unpublished bucket
  std::vector<int> next_reduce_;  // per group (inline mode): first bucket it has not reduced

  // Comm-thread mode: the driver authorizes step s (BeginStep publishes s + 1); the comm loop
  // waits for it. stop_ is read by the comm loop after a wake-up (release/acquire via the word).
  struct alignas(kCacheLine) CommControl {
    WaitWord authorized;
    std::atomic<bool> stop{false};
  };
  std::unique_ptr<CommControl[]> control_;
  std::vector<std::function<void()>> loop_fns_;  // referenced by the comm pools until joined
};

// The suffix reports of Backward (lnf, blocks L-1..0, embeddings), cut into buckets of about
// bucket_floats.
std::vector<comm::Range> MakeBuckets(const model::ParamLayout& layout, std::size_t bucket_floats);

}  // namespace cputrain::train
