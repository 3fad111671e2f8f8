#include "train/grad_sync.h"

#include <algorithm>
#include <functional>
#include <string>

#include "common/error.h"

namespace cputrain::train {

std::vector<comm::Range> MakeBuckets(const model::ParamLayout& layout, std::size_t bucket_floats) {
  bucket_floats = std::max<std::size_t>(bucket_floats, comm::kShardAlign);
  // Suffix report points, as Backward makes them, descending.
  const std::vector<std::size_t> points = layout.ReadyPoints();
  std::vector<comm::Range> out;
  std::size_t hi = layout.total();  // the current bucket is [?, hi)
  for (std::size_t i = 0; i < points.size(); ++i) {
    const std::size_t p = points[i];
    // Close the bucket at report point p once it is big enough (or at the very end). A long
    // stretch between two points (wte) is cut into pieces of bucket_floats from the top.
    while (hi - p >= 2 * bucket_floats) {
      out.push_back({hi - bucket_floats, hi});
      hi -= bucket_floats;
    }
    if (hi - p >= bucket_floats || p == 0) {
      if (hi > p) out.push_back({p, hi});
      hi = p;
    }
  }
  return out;
}

GradSync::GradSync(const model::ParamLayout& layout, std::vector<WorkerPool*> pools,
                   std::vector<WorkerPool*> comm_pools, std::vector<float*> grads,
                   std::size_t bucket_floats, comm::Distributed* dist)
    : total_(layout.total()),
      pools_(std::move(pools)),
      comm_pools_(std::move(comm_pools)),
      grads_(grads),
      dist_(dist),
      buckets_(MakeBuckets(layout, bucket_floats)),
      sync_(static_cast<int>(pools_.size()), total_, static_cast<int>(buckets_.size())),
      next_bucket_(pools_.size(), 0),
      next_reduce_(pools_.size(), 0),
      control_(new CommControl[pools_.size()]) {
  CPUTRAIN_CHECK(grads.size() == pools_.size(), "one gradient buffer per group");
  CPUTRAIN_CHECK(comm_pools_.empty() || comm_pools_.size() == pools_.size(),
                 "comm pools: none or one per group");
  for (int g = 0; g < groups(); ++g) sync_.Register(g, grads[g]);
  for (int g = 0; g < static_cast<int>(comm_pools_.size()); ++g) {
    loop_fns_.emplace_back([this, g] { CommLoop(g); });
  }
  for (int g = 0; g < static_cast<int>(comm_pools_.size()); ++g)
    comm_pools_[g]->Start(loop_fns_[g]);
}

GradSync::~GradSync() {
  for (int g = 0; g < static_cast<int>(comm_pools_.size()); ++g) {
    // release (through the word's seq_cst publish): the loop sees stop after it wakes.
    control_[g].stop.store(true, std::memory_order_relaxed);
    control_[g].authorized.Add(1u << 30);
  }
  for (WorkerPool* p : comm_pools_) {
    try {
      p->Wait();
    } catch (...) {
      // An aborted run: the error was reported by the group that failed.
    }
  }
}

void GradSync::Abort(const std::string& reason) { sync_.Abort(reason); }

void GradSync::BeginStep(int group, uint64_t step) {
  next_bucket_[group] = 0;
  next_reduce_[group] = 0;
  if (!comm_pools_.empty()) control_[group].authorized.Publish(static_cast<uint32_t>(step + 1));
}

void GradSync::ReduceBucket(int group, WorkerPool& pool, uint64_t step, int b) {
  sync_.WaitAll(comm::BucketSync::Stage::kWritten, step, b);
  const comm::Range r = buckets_[b];
  const comm::Range own = Owned(group);
  const std::size_t lo = std::max(r.lo, own.lo), hi = std::min(r.hi, own.hi);
  if (lo < hi) {
    if (groups() > 1) {
      pool.ForEachThread([&](int t) { sync_.ReduceScatterRange(group, r, t, pool.size()); });
    }
    // Every process has the same layout, buckets and shards, so all call this for the same
    // (group, bucket) sequence — and all skip the empty intersections alike.
    if (dist_) dist_->AllreduceShard(group, grads_[group] + lo, hi - lo);
  }
  sync_.Publish(comm::BucketSync::Stage::kReduced, group, step, b);
}

void GradSync::OnBackwardReady(int group, uint64_t step, std::size_t from) {
  int& b = next_bucket_[group];
  while (b < static_cast<int>(buckets_.size()) && buckets_[b].lo >= from) {
    // The compute workers joined at the end of the last kernel: the bucket is written.
    sync_.Publish(comm::BucketSync::Stage::kWritten, group, step, b);
    ++b;
  }
  if (!comm_pools_.empty()) return;  // the comm threads reduce
  // Inline: reduce, in order, the buckets every group has written by now; don't wait.
  int& r = next_reduce_[group];
  while (r < b && sync_.AllPublished(comm::BucketSync::Stage::kWritten, step, r)) {
    ReduceBucket(group, *pools_[group], step, r);
    ++r;
  }
}

void GradSync::FinishStep(int group, uint64_t step) {
  CPUTRAIN_CHECK(next_bucket_[group] == static_cast<int>(buckets_.size()),
                 "FinishStep before backward reported every bucket");
  if (comm_pools_.empty()) {  // inline: what the other groups had not written yet
    for (int& r = next_reduce_[group]; r < static_cast<int>(buckets_.size()); ++r) {
      ReduceBucket(group, *pools_[group], step, r);
    }
  }
  const int last = static_cast<int>(buckets_.size()) - 1;
  // Every owner has reduced every bucket (owners publish in bucket order): our shard is final
  // and nobody reads our buffer for this step any more.
  sync_.WaitAll(comm::BucketSync::Stage::kReduced, step, last);
}

void GradSync::CommLoop(int group) {
  WorkerPool& pool = *comm_pools_[group];
  CommControl& c = control_[group];
  try {
    for (uint64_t step = 0;; ++step) {
      c.authorized.WaitAtLeast(static_cast<uint32_t>(step + 1));
      if (c.stop.load(std::memory_order_relaxed)) return;
      for (int b = 0; b < static_cast<int>(buckets_.size()); ++b)
        ReduceBucket(group, pool, step, b);
    }
  } catch (const std::exception& e) {
    // The drivers wait on this loop's publications: wake them with the reason, never hang.
    sync_.Abort(std::string("communication thread of group ") + std::to_string(group) +
                " failed: " + e.what());
    throw;
  }
}

}  // namespace cputrain::train
