// The collectives between groups, against closed-form sums:
//   Matrix:        G = 1..8 groups x {1, 2, mixed 1/2} threads per group x n in {0, 1, 7, 1000,
//                  2^20+3 (2^16+3 under TSan)} x {out of place, in place} x every op. Group g's
//                  element i is (g+1) + k/8 with k = (i + 7*call) mod 8191: every value, partial
//                  sum and total is exact in fp32, so the expected sum is exact in any order, and a
//                  value from the wrong index, the wrong group or a previous call shows up as a
//                  mismatch. Untouched regions (recv past the shard, the non-owned part of an
//                  in-place reduce-scatter) are checked too. The mixed layouts use
//                  non-temporal stores.
//   Determinism:   random values over 40 binades (the order of summation matters), random
//                  thread delays, repeated calls: results are bit-identical to each other and to
//                  a serial left-to-right sum in group order.
//   Failure:       a group that never arrives makes the others throw RuntimeError after the
//                  timeout (not hang), naming it; Abort wakes futex sleepers; mismatched calls
//                  throw.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "comm/comm.h"
#include "comm_test_util.h"
#include "common/error.h"

namespace cputrain::comm {
namespace {

using testing::Layout;
using testing::MakeLayout;
using testing::RunSpmd;
using testing::RunSpmdCollect;

constexpr float kSentinel = -12345.0f;

// The large size: 2^20+3 (not a multiple of 16, shards of ~2 MiB per group at G=2). Under
// ThreadSanitizer every element access is instrumented and this size alone takes over five
// minutes, so the TSan build uses 2^16+3: still uneven, still many cache lines per thread, and the
// races TSan looks for do not depend on the size.
#if defined(__SANITIZE_THREAD__)
constexpr std::size_t kLargeN = (std::size_t{1} << 16) + 3;
#else
constexpr std::size_t kLargeN = (std::size_t{1} << 20) + 3;
#endif

enum class TestOp { kReduceScatter, kAllgather, kAllreduce, kBroadcast, kBarrier };
const char* TestOpName(TestOp op) {
  switch (op) {
    case TestOp::kReduceScatter:
      return "ReduceScatter";
    case TestOp::kAllgather:
      return "Allgather";
    case TestOp::kAllreduce:
      return "Allreduce";
    case TestOp::kBroadcast:
      return "Broadcast";
    case TestOp::kBarrier:
      return "Barrier";
  }
  return "?";
}

// Group g's input element i for call number `call`. Exact: (g+1) <= 8 and k/8 <= 1024.
float Value(int g, std::size_t i, uint64_t call) {
  const std::size_t k = (i + 7 * call) % 8191;
  return static_cast<float>(g + 1) + static_cast<float>(k) * 0.125f;
}
// Sum over G groups of Value(g, i, call), exact.
float SumValue(int G, std::size_t i, uint64_t call) {
  const std::size_t k = (i + 7 * call) % 8191;
  return static_cast<float>(G * (G + 1) / 2) +
         static_cast<float>(G) * static_cast<float>(k) * 0.125f;
}

struct MatrixParam {
  int groups;
  Layout layout;
};

// Shown by gtest/ctest instead of the parameter's bytes.
void PrintTo(const MatrixParam& p, std::ostream* os) {
  *os << p.groups << " groups, " << testing::LayoutName(p.layout);
}

class CommMatrixTest : public ::testing::TestWithParam<MatrixParam> {
 protected:
  void SetUp() override { testing::UseOversubscribedSpinLimit(); }
};

// One thread's view of its group's buffers: it initializes and checks the elements
// SplitRange gives it, so no two threads of a group touch the same element outside a collective.
struct GroupBuffers {
  std::vector<float> send, recv;
};

TEST_P(CommMatrixTest, EveryOpSizeAndFormGivesTheClosedFormResult) {
  const int G = GetParam().groups;
  const std::vector<int> tpg = MakeLayout(G, GetParam().layout);
  const std::vector<std::size_t> sizes = {0, 1, 7, 1000, kLargeN};
  const std::size_t nmax = sizes.back();
  std::vector<GroupBuffers> bufs(static_cast<std::size_t>(G));
  for (auto& b : bufs) {
    b.send.assign(nmax, 0.0f);
    b.recv.assign(nmax, 0.0f);
  }
  // The mixed layouts also take the non-temporal store path, at every size.
  CommOptions opts;
  if (GetParam().layout == Layout::kMixed) opts.streaming_store_bytes = 1;
  Communicator comm(tpg, opts);

  RunSpmd(
      tpg,
      [&](int g, int t) {
        const int T = tpg[static_cast<std::size_t>(g)];
        float* send = bufs[static_cast<std::size_t>(g)].send.data();
        float* recv = bufs[static_cast<std::size_t>(g)].recv.data();
        uint64_t call = 0;
        for (std::size_t n : sizes) {
          for (TestOp op : {TestOp::kReduceScatter, TestOp::kAllgather, TestOp::kAllreduce,
                            TestOp::kBroadcast, TestOp::kBarrier}) {
            for (bool in_place : {false, true}) {
              ++call;
              const Range own = ShardBounds(n, G, g);
              const Range mine = SplitRange(Range{0, nmax}, T, t);  // what this thread inits/checks
              const int root = static_cast<int>(call % static_cast<uint64_t>(G));
              // Inputs: send = Value(g, i) everywhere, recv = sentinel (allgather: the own shard at
              // its place in recv for the in-place form, at send[0..] otherwise).
              for (std::size_t i = mine.lo; i < mine.hi; ++i) {
                if (op != TestOp::kAllgather) send[i] = Value(g, i, call);
                recv[i] = kSentinel;
              }
              if (op == TestOp::kAllgather) {
                // Out of place the shard goes to send[0, own.size()): indexes i - own.lo of the
                // threads' disjoint ranges are disjoint too.
                for (std::size_t i = std::max(mine.lo, own.lo); i < std::min(mine.hi, own.hi);
                     ++i) {
                  (in_place ? recv[i] : send[i - own.lo]) = Value(g, i, call);
                }
              }
              // Not needed for the collectives (contract 2 orders every thread's writes before
              // the call), but it puts a barrier between every two collectives of the matrix.
              comm.Barrier(g, t);
              switch (op) {
                case TestOp::kReduceScatter:
                  comm.ReduceScatter(g, t, send, in_place ? send : recv, n);
                  break;
                case TestOp::kAllgather:
                  comm.Allgather(g, t, in_place ? recv + own.lo : send, recv, n);
                  break;
                case TestOp::kAllreduce:
                  comm.Allreduce(g, t, send, in_place ? send : recv, n);
                  break;
                case TestOp::kBroadcast:
                  // In place: the root broadcasts from recv (pre-filled by copying send), the
                  // others pass no send at all.
                  if (in_place) {
                    if (g == root) {
                      for (std::size_t i = mine.lo; i < mine.hi; ++i) recv[i] = send[i];
                    }
                    comm.Barrier(g, t);
                    comm.Broadcast(g, t, root, g == root ? recv : nullptr, recv, n);
                  } else {
                    comm.Broadcast(g, t, root, send, recv, n);
                  }
                  break;
                case TestOp::kBarrier:
                  comm.Barrier(g, t);
                  break;
              }
              // Check this thread's elements.
              const std::string what = std::string(TestOpName(op)) + (in_place ? " in place" : "") +
                                       " n=" + std::to_string(n) + " group " + std::to_string(g);
              const bool out_in_send =
                  in_place && (op == TestOp::kReduceScatter || op == TestOp::kAllreduce);
              const float* out = out_in_send ? send : recv;
              int owner = 0;  // allgather: the group whose shard holds element i
              for (std::size_t i = mine.lo; i < mine.hi; ++i) {
                float want = kSentinel;
                const bool inside = i < n;
                switch (op) {
                  case TestOp::kReduceScatter:
                    if (in_place) {
                      want = inside && i >= own.lo && i < own.hi ? SumValue(G, i, call)
                                                                 : Value(g, i, call);
                    } else {
                      want = i < own.size() ? SumValue(G, own.lo + i, call) : kSentinel;
                    }
                    break;
                  case TestOp::kAllgather: {
                    while (owner + 1 < G && i >= ShardBounds(n, G, owner).hi) ++owner;  // i ascends
                    want = inside ? Value(owner, i, call) : kSentinel;
                    break;
                  }
                  case TestOp::kAllreduce:
                    want =
                        inside ? SumValue(G, i, call) : (in_place ? Value(g, i, call) : kSentinel);
                    break;
                  case TestOp::kBroadcast:
                    want = inside ? Value(root, i, call)
                                  : (in_place && g == root ? Value(g, i, call) : kSentinel);
                    break;
                  case TestOp::kBarrier:
                    want = kSentinel;
                    break;
                }
                if (out[i] != want) {
                  ADD_FAILURE() << what << ": element " << i << " is " << out[i] << ", want "
                                << want;
                  throw std::runtime_error("mismatch (first one reported above)");
                }
              }
              // The checks above read elements other threads of the group wrote (in the
              // collective); the next initialization writes them again, so order the two.
              comm.Barrier(g, t);
            }
          }
        }
      },
      [&] { comm.Abort("a test thread failed"); });
}

std::vector<MatrixParam> AllMatrixParams() {
  std::vector<MatrixParam> v;
  for (int G = 1; G <= 8; ++G) {
    for (Layout l : {Layout::kOne, Layout::kTwo, Layout::kMixed}) v.push_back({G, l});
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(GroupsByThreads, CommMatrixTest, ::testing::ValuesIn(AllMatrixParams()),
                         [](const ::testing::TestParamInfo<MatrixParam>& info) {
                           return "G" + std::to_string(info.param.groups) + "_" +
                                  testing::LayoutName(info.param.layout);
                         });

uint32_t Bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

TEST(CommDeterminism, RepeatedCallsWithRandomDelaysAreBitIdenticalToTheSerialGroupOrderSum) {
  testing::UseOversubscribedSpinLimit();
  const std::vector<int> tpg = {1, 2, 1, 2, 2};
  const int G = static_cast<int>(tpg.size());
  const std::size_t n = 100003;
  std::vector<std::vector<float>> input(static_cast<std::size_t>(G));
  std::mt19937 rng(2024);
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::uniform_int_distribution<int> expo(-20, 20);
  for (auto& in : input) {
    in.resize(n);
    for (float& x : in) x = std::ldexp(mant(rng), expo(rng));
  }
  // The reference: serial left-to-right sum in group order; and proof that order matters here.
  std::vector<float> reference(n);
  std::size_t order_sensitive = 0;
  for (std::size_t i = 0; i < n; ++i) {
    float fwd = input[0][i], bwd = input[static_cast<std::size_t>(G - 1)][i];
    for (int g = 1; g < G; ++g) fwd += input[static_cast<std::size_t>(g)][i];
    for (int g = G - 2; g >= 0; --g) bwd += input[static_cast<std::size_t>(g)][i];
    reference[i] = fwd;
    order_sensitive += Bits(fwd) != Bits(bwd);
  }
  ASSERT_GT(order_sensitive, n / 10) << "the inputs must make the summation order visible";

  Communicator comm(tpg);
  constexpr int kRuns = 4;
  // results[run][g]: allreduce output (out of place, then in place on alternate runs).
  std::vector<std::vector<std::vector<float>>> results(
      kRuns, std::vector<std::vector<float>>(static_cast<std::size_t>(G), std::vector<float>(n)));
  std::vector<std::vector<float>> work(static_cast<std::size_t>(G), std::vector<float>(n));
  std::vector<std::vector<float>> shards(static_cast<std::size_t>(G), std::vector<float>(n));
  RunSpmd(
      tpg,
      [&](int g, int t) {
        const std::size_t gi = static_cast<std::size_t>(g);
        std::mt19937 delay_rng(static_cast<uint32_t>(g * 10 + t));
        std::uniform_int_distribution<int> delay_us(0, 300);
        const Range mine = SplitRange(Range{0, n}, tpg[gi], t);
        for (int run = 0; run < kRuns; ++run) {
          std::this_thread::sleep_for(std::chrono::microseconds(delay_us(delay_rng)));
          const bool in_place = run % 2 == 1;
          float* out = results[static_cast<std::size_t>(run)][gi].data();
          float* src = in_place ? out : work[gi].data();
          for (std::size_t i = mine.lo; i < mine.hi; ++i) src[i] = input[gi][i];
          comm.Barrier(g, t);
          std::this_thread::sleep_for(std::chrono::microseconds(delay_us(delay_rng)));
          comm.Allreduce(g, t, src, out, n);
          // Reduce-scatter must give the owner the same bits for its shard.
          std::this_thread::sleep_for(std::chrono::microseconds(delay_us(delay_rng)));
          comm.ReduceScatter(g, t, input[gi].data(), shards[gi].data(), n);
          const Range own = ShardBounds(n, G, g);
          const Range part = SplitRange(own, tpg[gi], t);
          for (std::size_t i = part.lo; i < part.hi; ++i) {
            if (Bits(shards[gi][i - own.lo]) != Bits(reference[i])) {
              ADD_FAILURE() << "reduce-scatter run " << run << " group " << g << " element " << i;
              throw std::runtime_error("mismatch");
            }
          }
          comm.Barrier(g, t);
        }
      },
      [&] { comm.Abort("a test thread failed"); });
  for (int run = 0; run < kRuns; ++run) {
    for (int g = 0; g < G; ++g) {
      const std::vector<float>& r =
          results[static_cast<std::size_t>(run)][static_cast<std::size_t>(g)];
      for (std::size_t i = 0; i < n; ++i) {
        ASSERT_EQ(Bits(r[i]), Bits(reference[i])) << "run " << run << " group " << g << " i " << i;
      }
    }
  }
}

TEST(CommFailure, AGroupThatNeverArrivesMakesTheOthersThrowAfterTheTimeout) {
  testing::UseOversubscribedSpinLimit();
  CommOptions opts;
  opts.timeout = std::chrono::milliseconds(200);
  Communicator comm({2, 2, 2}, opts);
  std::vector<float> buf[2] = {std::vector<float>(1000, 1.0f), std::vector<float>(1000, 2.0f)};
  const auto start = std::chrono::steady_clock::now();
  // Groups 0 and 1 call Allreduce; group 2 never does.
  const auto errors = RunSpmdCollect(
      {2, 2}, [&](int g, int t) { comm.Allreduce(g, t, buf[g].data(), buf[g].data(), 1000); });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 10.0) << "the waiters must give up after the timeout, not hang";
  bool named = false;
  for (const std::exception_ptr& e : errors) {
    ASSERT_TRUE(e) << "every thread of the groups that arrived must throw";
    EXPECT_THROW(std::rethrow_exception(e), RuntimeError);
    const std::string msg = testing::ErrorMessage(e);
    named |= msg.find("for group 2") != std::string::npos;
  }
  EXPECT_TRUE(named) << "the timeout message names the missing group";
  EXPECT_TRUE(comm.aborted());
  // Contract 5: an aborted communicator refuses further calls at once.
  EXPECT_THROW(comm.Barrier(0, 0), RuntimeError);
}

TEST(CommFailure, AbortWakesThreadsSleepingOnTheFutexWithoutATimeout) {
  SetSpinLimit(16);           // the waiters reach the futex sleep quickly
  Communicator comm({2, 1});  // no timeout: waits sleep on the futex
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    comm.Abort("test abort");
  });
  const auto errors = RunSpmdCollect({2}, [&](int g, int t) { comm.Barrier(g, t); });
  aborter.join();
  for (const std::exception_ptr& e : errors) {
    ASSERT_TRUE(e);
    EXPECT_NE(testing::ErrorMessage(e).find("test abort"), std::string::npos);
  }
}

TEST(CommFailure, MismatchedCallsThrowInsteadOfMixingBuffers) {
  testing::UseOversubscribedSpinLimit();
  CommOptions opts;
  opts.timeout = std::chrono::seconds(20);
  Communicator comm({1, 1}, opts);
  std::vector<float> a(64), b(64);
  const auto errors = RunSpmdCollect({1, 1}, [&](int g, int t) {
    comm.Allreduce(g, t, g == 0 ? a.data() : b.data(), g == 0 ? a.data() : b.data(),
                   g == 0 ? 10 : 11);
  });
  for (const std::exception_ptr& e : errors) {
    ASSERT_TRUE(e);
    EXPECT_NE(testing::ErrorMessage(e).find("mismatch"), std::string::npos)
        << testing::ErrorMessage(e);
  }
}

TEST(CommFailure, BadArgumentsAreErrorsNotCrashes) {
  EXPECT_THROW(Communicator(std::vector<int>{}), InputError);
  EXPECT_THROW(Communicator(std::vector<int>{1, 0}), InputError);
  Communicator comm({1});
  std::vector<float> v(32);
  EXPECT_THROW(comm.Allreduce(1, 0, v.data(), v.data(), 32), RuntimeError);     // no group 1
  EXPECT_THROW(comm.Allreduce(0, 1, v.data(), v.data(), 32), RuntimeError);     // no thread 1
  EXPECT_THROW(comm.Allreduce(0, 0, v.data(), v.data() + 1, 8), RuntimeError);  // overlap
}

}  // namespace
}  // namespace cputrain::comm
