// Training end to end against PyTorch: 20 steps of the reference runs (tests/reference) with 1,
// 2 and 4 replica groups (2 and 4 on simulated machines) match torch's losses, gradient norms
// and validation losses within 1e-4 relative; runs are bit-identical run to run, between the
// inline and the comm-thread gradient sync, for any bucket size, and with a parameter replica per
// group or one shared by groups on one NUMA node.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "common/error.h"
#include "config/config.h"
#include "model/checkpoint.h"
#include "model/checkpoint_path.h"
#include "test_util.h"
#include "train/trainer.h"

namespace cputrain::train {
namespace {

std::string FixtureDir(const std::string& name) {
  return std::string(CPUTRAIN_SOURCE_DIR) + "/tests/reference/fixtures/" + name;
}

using ::cputrain::test::Slurp;

// The fixture's config with absolute paths, writing into out_dir, plus overrides.
Config FixtureConfig(const std::string& name, const std::string& out_dir,
                     std::vector<std::string> sets = {}) {
  const std::string dir = FixtureDir(name);
  Config c = ParseConfig(Slurp(dir + "/config.yaml"), dir + "/config.yaml", sets);
  c.model.init_from = dir + "/" + c.model.init_from;
  c.data.train = dir + "/" + c.data.train;
  if (!c.data.val.empty()) c.data.val = dir + "/" + c.data.val;
  c.train.out_dir = out_dir;
  return c;
}

TrainResult Quiet(const Config& c) {
  TrainOptions o;
  o.progress = Progress::kQuiet;
  return Train(c, o);
}

// metrics.jsonl without the timing fields.
std::string MetricsWithoutTimings(const std::string& out_dir) {
  std::ifstream in(out_dir + "/metrics.jsonl");
  std::string line, all;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line);
    for (const char* timing :
         {"ms", "tokens_per_s", "forward_ms", "backward_ms", "comm_ms", "optimizer_ms"}) {
      j.erase(timing);
    }
    all += j.dump() + "\n";
  }
  return all;
}

struct ParityCase {
  const char* fixture;
  const char* topology;
  int groups;
  const char* group_by = "socket";  // l3: groups on one NUMA node, sharing one replica
};

class Parity : public ::testing::TestWithParam<ParityCase> {};

TEST_P(Parity, TwentyStepsMatchPyTorch) {
  const ParityCase pc = GetParam();
  test::TempDir out;
  Config c = FixtureConfig(
      pc.fixture, out.path(),
      {std::string("topology=") + pc.topology, std::string("placement.group_by=") + pc.group_by});
  TrainResult r = Quiet(c);
  const nlohmann::json ref = nlohmann::json::parse(Slurp(FixtureDir(pc.fixture) + "/losses.json"));
  ASSERT_EQ(r.steps.size(), ref["steps"].size());
  for (std::size_t s = 0; s < r.steps.size(); ++s) {
    const double want = ref["steps"][s];
    EXPECT_NEAR(r.steps[s].loss, want, 1e-4 * std::fabs(want)) << "step " << s;
    const double norm = ref["grad_norms"][s];
    EXPECT_NEAR(r.steps[s].grad_norm, norm, 1e-4 * norm) << "step " << s;
    EXPECT_NEAR(r.steps[s].lr, ref["lrs"][s].get<double>(), 1e-12) << "step " << s;
  }
  for (const auto& v : ref["val"]) {
    bool found = false;
    for (const EvalRecord& e : r.evals) {
      if (e.step == v["after_steps"].get<int>()) {
        EXPECT_NEAR(e.val_loss, v["loss"].get<double>(), 1e-4 * v["loss"].get<double>());
        found = true;
      }
    }
    EXPECT_TRUE(found) << "no evaluation after " << v["after_steps"] << " steps";
  }
  // The outputs a user reads: metrics, a loadable checkpoint, placement with one entry per group.
  EXPECT_TRUE(std::filesystem::exists(out.path() + "/metrics.jsonl"));
  EXPECT_EQ(model::ReadCheckpointShape(model::ResolveModelFile(out.path())),
            model::ReadCheckpointShape(c.model.init_from));
  nlohmann::json placement = nlohmann::json::parse(Slurp(out.path() + "/placement.json"));
  EXPECT_EQ(placement["groups"].size(), static_cast<std::size_t>(pc.groups));
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, Parity,
    ::testing::Values(ParityCase{"tiny", "this", 1}, ParityCase{"odd", "this", 1},
                      ParityCase{"tiny", "synthetic:pack:2 numa:1 core:1 pu:1", 2},
                      ParityCase{"odd", "synthetic:pack:2 numa:1 core:1 pu:1", 2},
                      ParityCase{"odd", "synthetic:pack:4 numa:1 core:1 pu:1", 4},
                      ParityCase{"odd", "synthetic:pack:1 numa:1 l3:2 core:1 pu:1", 2, "l3"},
                      ParityCase{"odd", "synthetic:pack:1 numa:1 l3:4 core:1 pu:1", 4, "l3"}),
    [](const auto& info) {
      return std::string(info.param.fixture) + "_" + std::to_string(info.param.groups) + "groups" +
             (std::string(info.param.group_by) == "l3" ? "_one_node" : "");
    });

// Runs repeat bit for bit, whatever the sync mode (inline or comm threads, any bucket size) and
// whether the groups keep a parameter replica each (on different NUMA nodes) or share group 0's
// (all on one node: no allgather): the same sums in the same order, the same updates.
TEST(Train, TwoGroupRunsAreBitIdenticalWhateverTheSyncModeAndReplicas) {
  const std::string topo = "topology=synthetic:pack:2 numa:1 core:2 pu:1";
  const std::string one_node = "topology=synthetic:pack:1 numa:1 l3:2 core:2 pu:1";
  test::TempDir a, b, c, d, e, f;
  Quiet(FixtureConfig("odd", a.path(), {topo, "placement.threads_per_group=1"}));
  Quiet(FixtureConfig("odd", b.path(), {topo, "placement.threads_per_group=1"}));
  // Comm threads (one per group, overlapping backward) with small buckets, and inline sync with
  // the same small buckets: the same sums in the same order.
  Quiet(FixtureConfig("odd", c.path(), {topo, "placement.comm_threads=1", "comm.bucket_mb=0.05"}));
  Quiet(FixtureConfig("odd", d.path(),
                      {topo, "placement.threads_per_group=1", "comm.bucket_mb=0.05"}));
  // Both groups on one NUMA node: one shared replica, inline and with comm threads.
  Quiet(FixtureConfig("odd", e.path(),
                      {one_node, "placement.group_by=l3", "placement.threads_per_group=1"}));
  Quiet(FixtureConfig(
      "odd", f.path(),
      {one_node, "placement.group_by=l3", "placement.comm_threads=1", "comm.bucket_mb=0.05"}));
  const std::string ma = MetricsWithoutTimings(a.path());
  EXPECT_EQ(ma, MetricsWithoutTimings(b.path()));
  EXPECT_EQ(ma, MetricsWithoutTimings(c.path()));
  EXPECT_EQ(ma, MetricsWithoutTimings(d.path()));
  EXPECT_EQ(ma, MetricsWithoutTimings(e.path()));
  EXPECT_EQ(ma, MetricsWithoutTimings(f.path()));
  const std::string model = Slurp(model::ResolveModelFile(a.path()));
  EXPECT_EQ(model, Slurp(model::ResolveModelFile(c.path())));
  EXPECT_EQ(model, Slurp(model::ResolveModelFile(e.path())));
  EXPECT_EQ(model, Slurp(model::ResolveModelFile(f.path())));
  // placement.json says which replica each group trains on.
  nlohmann::json pa = nlohmann::json::parse(Slurp(a.path() + "/placement.json"));
  nlohmann::json pe = nlohmann::json::parse(Slurp(e.path() + "/placement.json"));
  ASSERT_EQ(pa["groups"].size(), 2u);
  ASSERT_EQ(pe["groups"].size(), 2u);
  EXPECT_EQ(pa["groups"][1]["param_replica"], 1);
  EXPECT_EQ(pe["groups"][0]["param_replica"], 0);
  EXPECT_EQ(pe["groups"][1]["param_replica"], 0);
}

TEST(Train, CheckpointRoundTripIsByteIdentical) {
  // Load the fixture's llm.c checkpoint into the layer-major buffer and write it back.
  const std::string src = FixtureDir("odd") + "/model.bin";
  model::ParamLayout layout(model::ReadCheckpointShape(src));
  std::vector<float> p(layout.total());
  model::LoadCheckpoint(src, layout, p.data());
  test::TempDir dir;
  model::SaveCheckpoint(dir.path() + "/again.bin", layout, p.data());
  EXPECT_EQ(Slurp(src), Slurp(dir.path() + "/again.bin"));
}

TEST(Train, BatchMustDivideAcrossGroups) {
  test::TempDir out;
  Config c = FixtureConfig("tiny", out.path(),
                           {"topology=synthetic:pack:3 numa:1 core:1 pu:1", "data.batch_size=4"});
  try {
    Quiet(c);
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("not divisible by the 3 replica groups"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace cputrain::train
