// BucketSync, used the way the trainer's overlapped gradient sync will: every step each group
// writes its buckets in order and publishes them; owners reduce their part of a bucket as soon
// as every group has published it (while the producers go on writing later buckets), publish
// kReduced; every group gathers and publishes kGathered; the next step overwrites bucket b only
// after WaitAll(kGathered, s-1, b) (contract 3). Values carry the step, so a reduction that read
// a bucket too early (previous step) or too late (next step's values) gives a wrong sum; under
// ThreadSanitizer the same run proves the buffer hand-offs race-free.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "comm/bucket_sync.h"
#include "comm/comm.h"
#include "comm_test_util.h"
#include "common/error.h"

namespace cputrain::comm {
namespace {

using Stage = BucketSync::Stage;

// Exact in fp32 (see comm_collectives_test.cc).
float Value(int g, std::size_t i, uint64_t step) {
  return static_cast<float>(g + 1) + static_cast<float>((i + 13 * step) % 8191) * 0.125f;
}
float SumValue(int G, std::size_t i, uint64_t step) {
  return static_cast<float>(G * (G + 1) / 2) +
         static_cast<float>(G) * static_cast<float>((i + 13 * step) % 8191) * 0.125f;
}

TEST(CommBucketSync, BucketsReducedWhileLaterOnesAreWrittenThenGatheredAndReused) {
  testing::UseOversubscribedSpinLimit();
  const std::vector<int> tpg = {2, 1, 2};
  const int G = static_cast<int>(tpg.size());
  const std::size_t n = 10007;
  // Uneven buckets, one of a single element, none aligned to the shards.
  const std::vector<std::size_t> edges = {0, 1500, 1501, 6000, n};
  const int B = static_cast<int>(edges.size()) - 1;
  constexpr uint64_t kSteps = 12;
  CommOptions opts;
  opts.timeout = std::chrono::seconds(60);  // a protocol bug fails the test instead of hanging it
  BucketSync sync(G, n, B, opts);
  std::vector<std::vector<float>> grads(static_cast<std::size_t>(G), std::vector<float>(n));
  // Each group's threads join with a one-group communicator's barrier (the trainer has its
  // WorkerPool for that).
  std::vector<std::unique_ptr<Communicator>> joins;
  for (int T : tpg) joins.push_back(std::make_unique<Communicator>(std::vector<int>{T}));

  testing::RunSpmd(
      tpg,
      [&](int g, int t) {
        const std::size_t gi = static_cast<std::size_t>(g);
        const int T = tpg[gi];
        Communicator& join = *joins[gi];
        float* buf = grads[gi].data();
        if (t == 0) sync.Register(g, buf);  // before this group's first Publish (contract 1)
        auto bucket = [&](int b) {
          return Range{edges[static_cast<std::size_t>(b)], edges[static_cast<std::size_t>(b) + 1]};
        };
        auto reduce = [&](uint64_t s, int b) {
          sync.WaitAll(Stage::kWritten, s, b);
          sync.ReduceScatterRange(g, bucket(b), t, T);
          join.Barrier(0, t);
          if (t == 0) sync.Publish(Stage::kReduced, g, s, b);
        };
        for (uint64_t s = 0; s < kSteps; ++s) {
          for (int b = 0; b < B; ++b) {
            // Contract 3: peers may still read bucket b of step s-1 until they published kGathered.
            if (s > 0) sync.WaitAll(Stage::kGathered, s - 1, b);
            const Range mine = SplitRange(bucket(b), T, t);
            for (std::size_t i = mine.lo; i < mine.hi; ++i) buf[i] = Value(g, i, s);
            join.Barrier(0, t);
            if (t == 0) sync.Publish(Stage::kWritten, g, s, b);
            if (b > 0) reduce(s, b - 1);  // overlap: reduce the previous bucket
          }
          reduce(s, B - 1);
          for (int b = 0; b < B; ++b) {
            sync.WaitAll(Stage::kReduced, s, b);
            sync.AllgatherRange(g, bucket(b), t, T);
            join.Barrier(0, t);
            if (t == 0) sync.Publish(Stage::kGathered, g, s, b);
          }
          const Range mine = SplitRange(Range{0, n}, T, t);
          for (std::size_t i = mine.lo; i < mine.hi; ++i) {
            if (buf[i] != SumValue(G, i, s)) {
              ADD_FAILURE() << "step " << s << " group " << g << " element " << i << " is "
                            << buf[i] << ", want " << SumValue(G, i, s);
              throw std::runtime_error("mismatch");
            }
          }
          join.Barrier(0, t);  // the check read what the other threads gathered; order the rewrite
        }
      },
      [&] {
        sync.Abort("a test thread failed");
        for (auto& j : joins) j->Abort("a test thread failed");
      });
}

TEST(CommBucketSync, PublishingOutOfOrderIsAnError) {
  BucketSync sync(2, 100, 3);
  std::vector<float> a(100), b(100);
  sync.Register(0, a.data());
  sync.Publish(Stage::kWritten, 0, 0, 0);
  EXPECT_THROW(sync.Publish(Stage::kWritten, 0, 0, 2), RuntimeError);  // skipped bucket 1
  EXPECT_THROW(sync.Publish(Stage::kWritten, 0, 0, 0), RuntimeError);  // twice
  EXPECT_THROW(sync.Publish(Stage::kWritten, 0, 0, 3), RuntimeError);  // no bucket 3
  sync.Publish(Stage::kWritten, 0, 0, 1);
  sync.Publish(Stage::kWritten, 0, 0, 2);
  sync.Publish(Stage::kWritten, 0, 1, 0);  // next step
}

TEST(CommBucketSync, AWaitForAGroupThatNeverPublishesTimesOutAndWakesTheOthers) {
  testing::UseOversubscribedSpinLimit();
  CommOptions opts;
  opts.timeout = std::chrono::milliseconds(150);
  BucketSync sync(3, 64, 1, opts);
  // Two waiters: one times out and aborts, the other (possibly still within its own timeout)
  // must throw as well.
  const auto errors = testing::RunSpmdCollect({2}, [&](int, int t) {
    sync.Publish(Stage::kWritten, t, 0, 0);
    sync.WaitAll(Stage::kWritten, 0, 0);  // group 2 never publishes
  });
  for (const std::exception_ptr& e : errors) {
    ASSERT_TRUE(e);
    EXPECT_NE(testing::ErrorMessage(e).find("group 2"), std::string::npos)
        << testing::ErrorMessage(e);
  }
  EXPECT_TRUE(sync.aborted());
  EXPECT_THROW(sync.Wait(Stage::kWritten, 0, 0, 0), RuntimeError);
}

}  // namespace
}  // namespace cputrain::comm
