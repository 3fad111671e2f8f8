// Stress: many collectives of random op, size, root and per-group form (in place or not, chosen
// independently per group), with random delays on every thread, on oversubscribed groups of
// different thread counts; with the futex path (no timeout, cached stores) and the polling path
// (timeout set, non-temporal stores).
//
// Invariant checked after every call, by every thread on its slice of its group's buffers:
//   the output holds exactly the closed-form result for THIS iteration, and what the op must not
//   touch still holds this iteration's input or sentinel.
// Inputs are tagged with the iteration (Value(g, i, iter)), so a collective that read a peer's
// buffer before the peer wrote it (previous iteration's values), after the peer had moved on and
// overwritten it (next iteration's), from the wrong group or the wrong offset, gives a different
// number. Each thread rewrites its inputs the moment a call returns, with no extra
// synchronization: contract 2 of comm.h says that is safe, and ThreadSanitizer (this test runs
// in the TSan build, no suppressions) checks that no peer still touches them.
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "comm/comm.h"
#include "comm_test_util.h"

namespace cputrain::comm {
namespace {

constexpr float kSentinel = -777.0f;

float Value(int g, std::size_t i, uint64_t iter) {
  return static_cast<float>(g + 1) + static_cast<float>((i + 5 * iter) % 8191) * 0.125f;
}
float SumValue(int G, std::size_t i, uint64_t iter) {
  return static_cast<float>(G * (G + 1) / 2) +
         static_cast<float>(G) * static_cast<float>((i + 5 * iter) % 8191) * 0.125f;
}

enum class Op { kReduceScatter, kAllgather, kAllreduce, kBroadcast, kBarrier };

// What every thread of every group does in one iteration: drawn from a generator seeded with the
// iteration, so all threads agree without talking (the SPMD rule).
struct Plan {
  Op op;
  std::size_t n;
  int root;
  std::vector<bool> in_place;  // per group
};

Plan MakePlan(uint64_t iter, int G, std::size_t nmax) {
  std::mt19937_64 rng(0x5eed0000u + iter);
  Plan p;
  p.op = static_cast<Op>(rng() % 5);
  // Mostly small (protocol-bound, many phases per second), sometimes up to nmax (data-bound).
  const uint64_t kind = rng() % 10;
  p.n = kind == 0 ? 0 : kind < 8 ? rng() % 3000 : rng() % (nmax + 1);
  p.root = static_cast<int>(rng() % static_cast<uint64_t>(G));
  for (int g = 0; g < G; ++g) p.in_place.push_back(rng() % 2 == 0);
  return p;
}

struct StressParam {
  std::vector<int> tpg;
  bool timed;  // timeout set: the polling wait path; else the futex path
  int iterations;
};

// Shown by gtest/ctest instead of the parameter's bytes.
void PrintTo(const StressParam& p, std::ostream* os) {
  *os << p.tpg.size() << " groups, " << (p.timed ? "timeout" : "no timeout") << ", " << p.iterations
      << " iterations";
}

class CommStressTest : public ::testing::TestWithParam<StressParam> {};

TEST_P(CommStressTest, RandomOpsSizesFormsAndDelaysKeepEveryResultExact) {
  testing::UseOversubscribedSpinLimit();
  const std::vector<int>& tpg = GetParam().tpg;
  const int G = static_cast<int>(tpg.size());
  const uint64_t iterations = static_cast<uint64_t>(GetParam().iterations);
  const std::size_t nmax = 40000;
  CommOptions opts;
  if (GetParam().timed) {
    opts.timeout = std::chrono::seconds(20);
    opts.streaming_store_bytes = 1;  // and the non-temporal store path, at every size
  }
  Communicator comm(tpg, opts);
  struct Buffers {
    std::vector<float> send, recv, shard_in;  // shard_in: allgather's out-of-place input
  };
  std::vector<Buffers> bufs(static_cast<std::size_t>(G));
  for (Buffers& b : bufs) {
    b.send.assign(nmax, 0.0f);
    b.recv.assign(nmax, 0.0f);
    b.shard_in.assign(nmax, 0.0f);
  }
  std::vector<uint64_t> calls_made(tpg.size() * 2, 0);

  testing::RunSpmd(
      tpg,
      [&](int g, int t) {
        const std::size_t gi = static_cast<std::size_t>(g);
        const int T = tpg[gi];
        float* send = bufs[gi].send.data();
        float* recv = bufs[gi].recv.data();
        float* shard_in = bufs[gi].shard_in.data();
        std::mt19937 delay_rng(static_cast<uint32_t>(1000 * g + t));
        auto delay = [&] {
          switch (delay_rng() % 8) {
            case 0:
              std::this_thread::yield();
              break;
            case 1:
              std::this_thread::sleep_for(std::chrono::microseconds(delay_rng() % 200));
              break;
            case 2:
              for (uint32_t i = delay_rng() % 20000; i > 0; --i) CpuRelax();
              break;
            default:
              break;  // mostly no delay: keep the counters hot too
          }
        };
        const Range mine = SplitRange(Range{0, nmax}, T, t);
        uint64_t calls = 0;
        for (uint64_t iter = 0; iter < iterations; ++iter) {
          const Plan p = MakePlan(iter, G, nmax);
          const bool in_place = p.in_place[gi];
          const Range own = ShardBounds(p.n, G, g);
          // Inputs of this iteration, written right after the previous call returned.
          for (std::size_t i = mine.lo; i < mine.hi; ++i) {
            send[i] = Value(g, i, iter);
            recv[i] = kSentinel;
          }
          if (p.op == Op::kAllgather) {
            for (std::size_t i = std::max(mine.lo, own.lo); i < std::min(mine.hi, own.hi); ++i) {
              (in_place ? recv[i] : shard_in[i - own.lo]) = Value(g, i, iter);
            }
          }
          if (p.op == Op::kBroadcast && in_place && g == p.root) {
            for (std::size_t i = mine.lo; i < mine.hi; ++i) recv[i] = Value(g, i, iter);
          }
          delay();
          switch (p.op) {
            case Op::kReduceScatter:
              comm.ReduceScatter(g, t, send, in_place ? send : recv, p.n);
              break;
            case Op::kAllgather:
              comm.Allgather(g, t, in_place ? recv + own.lo : shard_in, recv, p.n);
              break;
            case Op::kAllreduce:
              comm.Allreduce(g, t, send, in_place ? send : recv, p.n);
              break;
            case Op::kBroadcast:
              comm.Broadcast(g, t, p.root, in_place ? (g == p.root ? recv : nullptr) : send, recv,
                             p.n);
              break;
            case Op::kBarrier:
              comm.Barrier(g, t);
              break;
          }
          ++calls;
          delay();
          // The invariant, on this thread's slice.
          int owner = 0;
          for (std::size_t i = mine.lo; i < mine.hi; ++i) {
            const bool inside = i < p.n;
            float want_send = Value(g, i, iter), want_recv = kSentinel;
            switch (p.op) {
              case Op::kReduceScatter:
                if (in_place) {
                  if (inside && i >= own.lo && i < own.hi) want_send = SumValue(G, i, iter);
                } else if (i < own.size()) {
                  want_recv = SumValue(G, own.lo + i, iter);
                }
                break;
              case Op::kAllgather:
                while (owner + 1 < G && i >= ShardBounds(p.n, G, owner).hi) ++owner;
                if (inside) want_recv = Value(owner, i, iter);
                break;
              case Op::kAllreduce:
                if (inside) (in_place ? want_send : want_recv) = SumValue(G, i, iter);
                break;
              case Op::kBroadcast:
                if (inside) {
                  want_recv = Value(p.root, i, iter);
                } else if (in_place && g == p.root) {
                  want_recv = Value(g, i, iter);
                }
                break;
              case Op::kBarrier:
                break;
            }
            if (send[i] != want_send || recv[i] != want_recv) {
              ADD_FAILURE() << "iteration " << iter << " op " << static_cast<int>(p.op)
                            << " n=" << p.n << (in_place ? " in place" : "") << " group " << g
                            << " element " << i << ": send " << send[i] << " (want " << want_send
                            << "), recv " << recv[i] << " (want " << want_recv << ")";
              throw std::runtime_error("invariant violated (reported above)");
            }
          }
          // No barrier here: the next iteration rewrites this thread's slice at once. The slices of
          // one group's threads are disjoint, and shard_in (written at other offsets) is only read
          // inside a collective, which every thread has left before anyone returns from it.
        }
        calls_made[gi * 2 + static_cast<std::size_t>(t)] = calls;
      },
      [&] { comm.Abort("a test thread failed"); });
  for (int g = 0; g < G; ++g) {
    for (int t = 0; t < tpg[static_cast<std::size_t>(g)]; ++t) {
      EXPECT_EQ(calls_made[static_cast<std::size_t>(g) * 2 + static_cast<std::size_t>(t)],
                iterations);
    }
  }
  EXPECT_FALSE(comm.aborted());
}

// Iterations: thousands of calls (tens of thousands of phase points) per layout; the TSan build
// runs the same counts (about a minute there, under ten seconds in Release on 2 cores).
INSTANTIATE_TEST_SUITE_P(Layouts, CommStressTest,
                         ::testing::Values(StressParam{{1, 1}, false, 4000},
                                           StressParam{{2, 1, 2}, false, 2400},
                                           StressParam{{2, 1, 2}, true, 2400},
                                           StressParam{{1, 2, 1, 1, 2}, false, 1500},
                                           StressParam{{1, 2, 2, 1, 1, 2, 1, 2}, true, 900}),
                         [](const ::testing::TestParamInfo<StressParam>& info) {
                           // Appended piecewise: GCC 12 warns falsely (-Wrestrict, GCC bug 105651)
                           // on "literal" + std::to_string(..) at -O3.
                           std::string name = "G";
                           name += std::to_string(info.param.tpg.size());
                           name += "_T";
                           for (int t : info.param.tpg) name += std::to_string(t);
                           return name + (info.param.timed ? "_polling" : "_futex");
                         });

}  // namespace
}  // namespace cputrain::comm
