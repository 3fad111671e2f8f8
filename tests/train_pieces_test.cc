// The trainer's pieces on their own (src/train/{batches,replica_group,step,placement_check}.h):
// which rows a group reads, when groups share a replica, the cross-rank CPU check, and one step
// run against a fake Distributed.
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "alloc/numa_alloc.h"
#include "common/error.h"
#include "data/token_file.h"
#include "kernels/kernels.h"
#include "model/gpt2.h"
#include "test_util.h"
#include "topology/placement.h"
#include "topology/topology.h"
#include "train/batches.h"
#include "train/placement_check.h"
#include "train/replica_group.h"
#include "train/step.h"

namespace cputrain::train {
namespace {

std::string WriteTokens(const test::TempDir& dir, const std::vector<uint16_t>& tokens) {
  const std::string path = dir.path() + "/t.bin";
  data::TokenFileWriter w(path);
  w.Append(tokens.data(), tokens.size());
  w.Commit();
  return path;
}

TEST(TokenWindows, RowsOfAWindowAreTheFileShiftedByOne) {
  test::TempDir dir;
  std::vector<uint16_t> tokens(2 * 4 * 3 + 5);  // B=4, T=3: 2 windows and 4 spare tokens
  std::iota(tokens.begin(), tokens.end(), 0);
  const TokenWindows w = TokenWindows::Open(WriteTokens(dir, tokens), "data.train", 100, 4, 3);
  ASSERT_EQ(w.windows(), 2u);
  int in[6], tgt[6];
  w.LoadRows(/*w=*/1, /*row0=*/2, /*rows=*/2, in, tgt);  // window 1 starts at token 12
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(in[i], 12 + 6 + i);
    EXPECT_EQ(tgt[i], 12 + 6 + i + 1);
  }
}

TEST(TokenWindows, RefusesAFileShorterThanOneWindow) {
  test::TempDir dir;
  const std::string path = WriteTokens(dir, std::vector<uint16_t>(12, 1));  // B*T+1 = 13
  EXPECT_THROW(TokenWindows::Open(path, "data.train", 100, 4, 3), InputError);
  EXPECT_THROW(TokenWindows::Open("", "data.train", 100, 4, 3), InputError);
  EXPECT_THROW(TokenWindows::Open(path, "data.train", 1, 2, 3), InputError);  // id 1 >= V=1
}

topo::Plan PlanFor(const std::string& topology, const std::string& group_by) {
  topo::PlacementConfig pc;
  pc.group_by = group_by == "l3" ? topo::GroupBy::kL3 : topo::GroupBy::kSocket;
  return topo::PlanPlacement(topo::LoadTopology(topology), pc, nullptr);
}

TEST(ReplicaChoice, GroupsShareAReplicaOnlyWhenAllAreOnOneNode) {
  EXPECT_FALSE(ShareReplica(PlanFor("synthetic:pack:1 numa:1 core:2 pu:1", "socket")));  // G=1
  EXPECT_FALSE(ShareReplica(PlanFor("synthetic:pack:2 numa:1 core:1 pu:1", "socket")));
  EXPECT_TRUE(ShareReplica(PlanFor("synthetic:pack:1 numa:1 l3:2 core:1 pu:1", "l3")));
}

nlohmann::json Rank(int rank, const std::string& host, std::vector<int> cpus,
                    bool simulated = false) {
  return {{"rank", rank},
          {"host", host},
          {"simulated", simulated},
          {"groups", nlohmann::json::array({{{"cpus", cpus}}})}};
}

TEST(PlacementCheck, TwoRanksPinningOneCpuOfOneHostAreRefused) {
  const nlohmann::json ok = {Rank(0, "a", {0, 1}), Rank(1, "a", {2, 3}), Rank(2, "b", {0, 1})};
  EXPECT_NO_THROW(CheckNoSharedCpus(ok));
  const nlohmann::json sim = {Rank(0, "a", {0}, true), Rank(1, "a", {0}, true)};
  EXPECT_NO_THROW(CheckNoSharedCpus(sim));  // simulated machines pin nothing
  try {
    CheckNoSharedCpus({Rank(0, "a", {0, 1}), Rank(1, "b", {1}), Rank(2, "a", {1})});
    ADD_FAILURE() << "not refused";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("ranks 0 and 2 on host a both pin a worker to CPU 1"),
              std::string::npos)
        << e.what();
  }
}

nlohmann::json Bound(int rank, const std::string& host, std::vector<int> allowed,
                     std::vector<int> cpuset) {
  nlohmann::json r = Rank(rank, host, allowed);
  r["allowed_cpus"] = allowed;
  r["cpuset_cpus"] = cpuset;
  return r;
}

// mpirun -n 2 --map-by ppr:2:node with its default --bind-to core on a 4-core host: each rank
// plans one core and two cores idle; rank 0 must say so, naming the flags.
TEST(PlacementCheck, RanksWhoseBindingsLeaveCpusIdleAreWarnedAbout) {
  const auto w =
      UnusedCpuWarnings({Bound(0, "a", {0}, {0, 1, 2, 3}), Bound(1, "a", {1}, {0, 1, 2, 3}),
                         Bound(2, "b", {0, 1}, {0, 1}), Bound(3, "b", {2}, {0, 1, 2})});
  ASSERT_EQ(w.size(), 1u);  // host b: its ranks' bindings cover its cpuset 0-2
  EXPECT_NE(w[0].find("host a: the bindings of its 2 ranks leave CPU(s) 2-3"), std::string::npos)
      << w[0];
  EXPECT_NE(w[0].find("--bind-to none"), std::string::npos) << w[0];
  // One rank per host is judged by the rank itself (topo::ReviewBinding); simulated ranks pin
  // nothing; ranks covering the cpuset leave nothing idle.
  EXPECT_TRUE(UnusedCpuWarnings({Bound(0, "a", {0}, {0, 1}), Bound(1, "b", {0}, {0, 1})}).empty());
  EXPECT_TRUE(UnusedCpuWarnings({Bound(0, "a", {0}, {0, 1}), Bound(1, "a", {1}, {0, 1})}).empty());
}

// A Distributed of two processes whose other process holds exactly this one's data: every sum
// across ranks doubles (exact in binary floating point).
class MirrorDistributed final : public Distributed {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  void CheckConsistent(uint64_t, uint64_t, int) override {}
  double SumAcrossRanks(double v) override { return 2 * v; }
  void AllreduceShard(int, float* data, std::size_t n) override {
    for (std::size_t i = 0; i < n; ++i) data[i] *= 2;
    ++shard_calls;
  }
  std::vector<std::string> Gather(const std::string& t) override { return {t, t}; }
  void SetStep(int) override {}
  int shard_calls = 0;
};

struct StepRun {
  std::vector<double> losses, norms;
  std::vector<float> params;
};

// `steps` steps of a small GPT-2 on one group of `rows` rows, the global batch being B rows.
StepRun RunSteps(int B, int rows, Distributed* dist, int steps) {
  kernels::InitBlas();
  const topo::Topology topology = topo::LoadTopology("synthetic:pack:1 numa:1 core:2 pu:1");
  const topo::Plan plan = topo::PlanPlacement(topology, {}, nullptr);
  alloc::Configure(alloc::OptionsFor(topology));
  const model::Shape shape{16, 50, model::Shape::PadVocab(50), 2, 2, 16};
  const int T = 8;
  ReplicaGroups groups(topology, plan, shape, rows, T, false);
  groups.InitParams(
      [&](WorkerPool& pool, float* p) { model::RandomInit(pool, groups.layout(), 7, p); });
  Stepper stepper(groups, B, T, /*bucket_floats=*/1000, dist);
  StepRun run;
  for (int s = 0; s < steps; ++s) {
    auto load = [&](ReplicaGroup& g) {
      for (int i = 0; i < rows * T; ++i) {
        g.act->inputs[i] = (s * 7 + i * 3) % 50;
        g.act->targets[i] = (s * 5 + i * 11) % 50;
      }
    };
    const StepResult r = stepper.Step(s, load, {1e-3, 0.9, 0.95, 1e-8, 0.1, s + 1}, 1.0);
    run.losses.push_back(r.loss);
    run.norms.push_back(r.grad_norm);
  }
  run.params.assign(groups[0].weights, groups[0].weights + groups.layout().total());
  return run;
}

// Rows duplicated on a mirrored second process: the global batch doubles, and the mean loss,
// the gradients (scaled by 1/(2B*T), then summed over the two processes) and so every update
// are those of one process alone — to the bit, since the only differences are factors of two.
TEST(Stepper, AFakeSecondProcessWithTheSameRowsChangesNoBit) {
  const StepRun alone = RunSteps(/*B=*/2, /*rows=*/2, nullptr, 3);
  MirrorDistributed mirror;
  const StepRun mirrored = RunSteps(/*B=*/4, /*rows=*/2, &mirror, 3);
  EXPECT_GT(mirror.shard_calls, 0);
  EXPECT_EQ(alone.losses, mirrored.losses);
  EXPECT_EQ(alone.norms, mirrored.norms);
  EXPECT_EQ(alone.params, mirrored.params);
  EXPECT_LT(alone.losses.back(), alone.losses.front());  // it trains
}

}  // namespace
}  // namespace cputrain::train
