// The pinned worker pool: static parallel-for coverage, barriers (with a stated invariant),
// exception propagation, no thread creation per call, and — on this machine — each worker's
// binding and the CPU it runs on, read back from the OS.
#include "runtime/worker_pool.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <sched.h>

#include <atomic>
#include <stdexcept>
#include <vector>

#include "topology/binding.h"
#include "topology/topology.h"

namespace cputrain {
namespace {

int CountThreads() {
  int n = 0;
  DIR* d = opendir("/proc/self/task");
  while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

std::vector<int> FakeCpus(int n) {
  std::vector<int> v(n);
  for (int i = 0; i < n; ++i) v[i] = i;
  return v;
}

class PoolSizes : public ::testing::TestWithParam<int> {};

TEST_P(PoolSizes, ParallelForCoversEveryIndexOnce) {
  WorkerPool pool(FakeCpus(GetParam()), nullptr, "t");
  for (std::size_t n : {0, 1, 2, 3, 7, 1000, 4097}) {
    std::vector<std::atomic<int>> hits(n);
    std::atomic<int> calls{0};
    pool.ParallelFor(n, [&](std::size_t b, std::size_t e, int tid) {
      EXPECT_LT(b, e);
      std::size_t eb, ee;
      WorkerPool::Split(n, pool.size(), tid, &eb, &ee);
      EXPECT_EQ(b, eb);  // the static partition is what Split says
      EXPECT_EQ(e, ee);
      for (std::size_t i = b; i < e; ++i) hits[i].fetch_add(1);
      calls.fetch_add(1);
    });
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
    EXPECT_EQ(calls.load(), static_cast<int>(std::min<std::size_t>(n, pool.size())));
  }
}

// Invariant: after the k-th barrier every worker sees every other worker's phase-k write.
TEST_P(PoolSizes, BarrierOrdersPhases) {
  const int n = GetParam();
  WorkerPool pool(FakeCpus(n), nullptr, "t");
  constexpr int kPhases = 300;
  std::vector<int> slot(n, -1);  // plain ints: the barrier must provide the ordering
  std::atomic<int> violations{0};
  pool.ForEachThread([&](int tid) {
    for (int phase = 0; phase < kPhases; ++phase) {
      slot[tid] = phase;
      pool.Barrier();
      for (int other = 0; other < n; ++other) {
        if (slot[other] != phase) violations.fetch_add(1);
      }
      pool.Barrier();
    }
  });
  EXPECT_EQ(violations.load(), 0);
}

TEST_P(PoolSizes, RunExecutesOnWorkerZeroAndForksFromThere) {
  WorkerPool pool(FakeCpus(GetParam()), nullptr, "t");
  int driver_tid = -2;
  std::atomic<int> ran{0};
  pool.Run([&] {
    driver_tid = pool.ThisThreadId();
    pool.ForEachThread([&](int) { ran.fetch_add(1); });
  });
  EXPECT_EQ(driver_tid, 0);
  EXPECT_EQ(ran.load(), GetParam());
  EXPECT_EQ(pool.ThisThreadId(), -1);
}

INSTANTIATE_TEST_SUITE_P(Sizes, PoolSizes, ::testing::Values(1, 2, 3, 4, 8));

TEST(WorkerPool, ExceptionsReachTheCaller) {
  WorkerPool pool(FakeCpus(3), nullptr, "t");
  EXPECT_THROW(pool.ForEachThread([](int tid) {
    if (tid == 2) throw std::runtime_error("worker 2 failed");
  }),
               std::runtime_error);
  EXPECT_THROW(pool.Run([] { throw std::logic_error("driver failed"); }), std::logic_error);
  // The pool is still usable afterwards.
  std::atomic<int> ran{0};
  pool.ForEachThread([&](int) { ran.fetch_add(1); });
  EXPECT_EQ(ran.load(), 3);
}

TEST(WorkerPool, NoThreadIsCreatedPerCall) {
  WorkerPool pool(FakeCpus(4), nullptr, "t");
  const int before = CountThreads();
  std::atomic<long> sum{0};
  for (int step = 0; step < 2000; ++step) {
    pool.ParallelFor(
        64, [&](std::size_t b, std::size_t e, int) { sum.fetch_add(static_cast<long>(e - b)); });
  }
  EXPECT_EQ(CountThreads(), before);
  EXPECT_EQ(sum.load(), 2000L * 64);
}

TEST(WorkerPool, NestedForEachThreadIsRefused) {
  WorkerPool pool(FakeCpus(2), nullptr, "t");
  EXPECT_ANY_THROW(pool.ForEachThread([&](int tid) {
    if (tid == 1) pool.ForEachThread([](int) {});
  }));
}

TEST(WorkerPool, WorkersArePinnedToTheirPlannedCpus) {
  topo::Topology t = topo::LoadTopology("this");
  auto binder = topo::MakeBinder(t);
  ASSERT_TRUE(binder->binds());
  const std::vector<int> cpus = t.AllowedCpus();
  WorkerPool pool(cpus, binder.get(), "pin");
  std::vector<std::vector<int>> bindings = pool.BindingsReadBack();
  ASSERT_EQ(bindings.size(), cpus.size());
  for (std::size_t i = 0; i < cpus.size(); ++i) {
    EXPECT_EQ(bindings[i], std::vector<int>{cpus[i]}) << "worker " << i;
    EXPECT_EQ(pool.CpusSeenAtStart()[i], cpus[i]) << "worker " << i;
  }
  // While running jobs, each worker is on its CPU and its binding has not changed.
  std::vector<int> seen(cpus.size(), -1);
  std::vector<std::vector<int>> later(cpus.size());
  for (int rep = 0; rep < 50; ++rep) {
    pool.ForEachThread([&](int tid) {
      seen[tid] = sched_getcpu();
      later[tid] = binder->ThisThreadBinding();
    });
    for (std::size_t i = 0; i < cpus.size(); ++i) {
      ASSERT_EQ(seen[i], cpus[i]) << "worker " << i << " ran on CPU " << seen[i];
      ASSERT_EQ(later[i], std::vector<int>{cpus[i]});
    }
  }
}

TEST(WorkerPool, SimulatedMachinesAreNotPinned) {
  topo::Topology t = topo::LoadTopology("synthetic:pack:2 numa:1 core:2 pu:1");
  auto binder = topo::MakeBinder(t);
  EXPECT_FALSE(binder->binds());
  WorkerPool pool({2, 3}, binder.get(), "sim");
  for (const auto& b : pool.BindingsReadBack()) EXPECT_TRUE(b.empty());
}

TEST(WorkerPool, BindingToAMissingCpuFails) {
  topo::Topology t = topo::LoadTopology("this");
  auto binder = topo::MakeBinder(t);
  EXPECT_THROW(WorkerPool({100000}, binder.get(), "bad"), std::exception);
}

}  // namespace
}  // namespace cputrain
