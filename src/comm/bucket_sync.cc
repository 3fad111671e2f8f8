#include "comm/bucket_sync.h"

#include <fmt/format.h>

#include "comm/kernels.h"
#include "comm/sync.h"
#include "common/error.h"

namespace cputrain::comm {

// One group's stage counters; WaitWord is cache-line aligned, so each counter has its own line
// (the publisher writes it, every owner polls it).
struct BucketSync::Words {
  WaitWord stage[kStages];
};

const char* StageName(BucketSync::Stage stage) {
  switch (stage) {
    case BucketSync::Stage::kWritten:
      return "written";
    case BucketSync::Stage::kReduced:
      return "reduced";
    case BucketSync::Stage::kGathered:
      return "gathered";
  }
  return "?";
}

BucketSync::BucketSync(int groups, std::size_t n, int buckets_per_step, CommOptions options)
    : groups_(groups),
      n_(n),
      buckets_(buckets_per_step),
      options_(options),
      abort_(std::make_unique<internal::AbortState>()) {
  if (groups < 1)
    throw InputError(fmt::format("BucketSync needs at least 1 group, not {}", groups));
  if (buckets_per_step < 1) {
    throw InputError(
        fmt::format("BucketSync needs at least 1 bucket per step, not {}", buckets_per_step));
  }
  words_ = std::make_unique<Words[]>(static_cast<std::size_t>(groups));
  buffers_ = std::make_unique<float*[]>(static_cast<std::size_t>(groups));
}

BucketSync::~BucketSync() = default;

void BucketSync::CheckGroup(int group, const char* what) const {
  CPUTRAIN_CHECK(group >= 0 && group < groups_,
                 fmt::format("BucketSync::{}: group {} is not in [0, {})", what, group, groups_));
}

uint32_t BucketSync::Count(uint64_t step, int bucket) const {
  return static_cast<uint32_t>(step * static_cast<uint64_t>(buckets_) +
                               static_cast<uint64_t>(bucket));
}

const WaitWord& BucketSync::Word(Stage stage, int group) const {
  return words_[static_cast<std::size_t>(group)].stage[static_cast<int>(stage)];
}

void BucketSync::Register(int group, float* buffer) {
  CheckGroup(group, "Register");
  CPUTRAIN_CHECK(buffer != nullptr || n_ == 0, "BucketSync::Register: null buffer");
  // Plain store: published to peers by this group's first Publish (contract 1).
  buffers_[static_cast<std::size_t>(group)] = buffer;
}

void BucketSync::ReduceScatterRange(int group, Range r, int part, int parts) {
  CheckGroup(group, "ReduceScatterRange");
  if (abort_->IsSet()) throw RuntimeError("comm: BucketSync aborted: " + abort_->reason());
  const Range own = Owned(group);
  const Range piece{std::max(r.lo, own.lo), std::min(r.hi, own.hi)};
  const Range mine = SplitRange(piece, parts, part);
  if (mine.empty()) return;
  for (int h = 0; h < groups_; ++h) {
    CPUTRAIN_CHECK(buffers_[static_cast<std::size_t>(h)] != nullptr,
                   fmt::format("BucketSync: group {} has not registered its buffer", h));
  }
  // Sources in group order, dst aliasing source `group` (allowed by SumInto).
  SumIntoAt(buffers_[static_cast<std::size_t>(group)] + mine.lo, buffers_.get(), groups_, mine.lo,
            mine.size());
}

void BucketSync::AllgatherRange(int group, Range r, int part, int parts) {
  CheckGroup(group, "AllgatherRange");
  if (abort_->IsSet()) throw RuntimeError("comm: BucketSync aborted: " + abort_->reason());
  float* dst = buffers_[static_cast<std::size_t>(group)];
  for (int k = 1; k < groups_; ++k) {
    const int h = (group + k) % groups_;  // round-robin over owners, as the allgather does
    const Range own = Owned(h);
    const Range piece{std::max(r.lo, own.lo), std::min(r.hi, own.hi)};
    const Range mine = SplitRange(piece, parts, part);
    if (mine.empty()) continue;
    const float* src = buffers_[static_cast<std::size_t>(h)];
    CPUTRAIN_CHECK(
        src != nullptr && dst != nullptr,
        fmt::format("BucketSync: group {} or {} has not registered its buffer", h, group));
    Copy(dst + mine.lo, src + mine.lo, mine.size());
  }
}

void BucketSync::Publish(Stage stage, int group, uint64_t step, int bucket) {
  CheckGroup(group, "Publish");
  CPUTRAIN_CHECK(bucket >= 0 && bucket < buckets_,
                 fmt::format("BucketSync::Publish: bucket {} is not in [0, {})", bucket, buckets_));
  if (abort_->IsSet()) throw RuntimeError("comm: BucketSync aborted: " + abort_->reason());
  WaitWord& w = words_[static_cast<std::size_t>(group)].stage[static_cast<int>(stage)];
  // Only this publisher writes the word (contract 2) unless an abort poisoned it, checked above,
  // so the load reads our own last add.
  const uint32_t have = w.Load(), want = Count(step, bucket);
  if (have != want) {
    throw RuntimeError(fmt::format(
        "comm: BucketSync::Publish({}, group {}, step {}, bucket {}) out of order: the group has "
        "published {} buckets of that stage, this is number {}",
        StageName(stage), group, step, bucket, have, want));
  }
  // seq_cst add = release: everything the group wrote before (its threads joined into this one)
  // happens-before any waiter that acquires the new count. Add rather than store so that a
  // concurrent abort's poison is never overwritten.
  w.Add(1);
}

void BucketSync::Wait(Stage stage, int group, uint64_t step, int bucket) {
  CheckGroup(group, "Wait");
  const WaitWord& w = Word(stage, group);
  const uint32_t target = Count(step, bucket) + 1;
  switch (internal::WaitAtLeast(w, target, options_.timeout, *abort_)) {
    case internal::WaitResult::kReached:
      return;
    case internal::WaitResult::kAborted:
      throw RuntimeError("comm: BucketSync aborted: " + abort_->reason());
    case internal::WaitResult::kTimedOut: {
      const std::string msg = fmt::format(
          "BucketSync: waited {} for group {} to publish '{}' for step {} bucket {} (it has "
          "published {} buckets, this wait needs {})",
          internal::FormatDuration(options_.timeout), group, StageName(stage), step, bucket,
          w.Load(), target);
      Abort("timeout: " + msg);
      throw RuntimeError("comm: " + msg);
    }
  }
}

void BucketSync::WaitAll(Stage stage, uint64_t step, int bucket) {
  for (int h = 0; h < groups_; ++h) Wait(stage, h, step, bucket);
}

bool BucketSync::AllPublished(Stage stage, uint64_t step, int bucket) const {
  const uint32_t target = Count(step, bucket) + 1;
  for (int h = 0; h < groups_; ++h) {
    // WaitWord::Load is an acquire: the group's writes before its Publish are visible.
    if (!SeqAtLeast(Word(stage, h).Load(), target)) return false;
  }
  return true;
}

void BucketSync::Abort(const std::string& reason) {
  if (!abort_->Set(reason)) return;
  for (int h = 0; h < groups_; ++h) {
    for (WaitWord& w : words_[static_cast<std::size_t>(h)].stage) w.Add(internal::kPoison);
  }
}

bool BucketSync::aborted() const { return abort_->IsSet(); }

}  // namespace cputrain::comm
