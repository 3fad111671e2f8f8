// The placement planner on synthetic 1/2/4/8-socket machines, SMT, SNC shapes, explicit CPU
// lists, OMP_NUM_THREADS, comm threads, and every refusal the issue lists (exit code 2).
#include "topology/placement.h"

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "common/error.h"
#include "test_util.h"

namespace cputrain::topo {
namespace {

Topology Synth(const std::string& d) { return LoadTopology("synthetic:" + d); }

// Expects PlanPlacement to refuse with an InputError whose message contains `needle`.
void ExpectRefused(const Topology& t, const PlacementConfig& c, const std::string& needle,
                   const char* omp = nullptr) {
  try {
    PlanPlacement(t, c, omp);
    FAIL() << "expected a refusal mentioning '" << needle << "'";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message: " << e.what();
    EXPECT_EQ(e.exit_code(), 2);
  }
}

void ExpectDisjoint(const Plan& p) {
  std::set<int> used;
  for (const Group& g : p.groups) {
    for (int c : g.cpus) EXPECT_TRUE(used.insert(c).second) << "CPU " << c << " twice";
    for (int c : g.comm_cpus) EXPECT_TRUE(used.insert(c).second) << "comm CPU " << c << " twice";
  }
}

class SocketCounts : public ::testing::TestWithParam<int> {};

TEST_P(SocketCounts, OneGroupPerSocketOnItsOwnCpusAndNode) {
  const int sockets = GetParam();
  Topology t = Synth("pack:" + std::to_string(sockets) + " numa:1 core:4 pu:2");
  Plan p = PlanPlacement(t, PlacementConfig{}, nullptr);
  ASSERT_EQ(p.groups.size(), static_cast<std::size_t>(sockets));
  ExpectDisjoint(p);
  for (const Group& g : p.groups) {
    EXPECT_EQ(g.cpus.size(), 4u);  // physical cores only
    for (int cpu : g.cpus) EXPECT_EQ(t.FindPu(cpu)->package, g.index);
    EXPECT_EQ(g.numa_node, t.numa_nodes[t.packages[g.index].numa_nodes[0]].os_index);
  }
  EXPECT_TRUE(p.warnings.empty());
  EXPECT_TRUE(p.simulated);
}
INSTANTIATE_TEST_SUITE_P(Machines, SocketCounts, ::testing::Values(1, 2, 4, 8));

TEST(Placement, IssueExampleTwoSocketsSmt) {
  Topology t = Synth("pack:2 numa:1 core:4 pu:2");
  Plan p = PlanPlacement(t, PlacementConfig{}, nullptr);
  ASSERT_EQ(p.groups.size(), 2u);
  EXPECT_EQ(p.groups[0].cpus, (std::vector<int>{0, 2, 4, 6}));
  EXPECT_EQ(p.groups[1].cpus, (std::vector<int>{8, 10, 12, 14}));
  PlacementConfig ht;
  ht.hyperthreads = true;
  Plan q = PlanPlacement(t, ht, nullptr);
  ASSERT_EQ(q.groups.size(), 2u);
  EXPECT_EQ(q.groups[0].cpus.size(), 8u);
  EXPECT_EQ(q.groups[1].cpus.size(), 8u);
  ExpectDisjoint(q);
}

TEST(Placement, GroupsTakesTheFirstDomains) {
  Topology t = Synth("pack:4 numa:1 core:2 pu:1");
  PlacementConfig c;
  c.groups = 2;
  Plan p = PlanPlacement(t, c, nullptr);
  ASSERT_EQ(p.groups.size(), 2u);
  EXPECT_EQ(p.groups[1].domain, "package 1");
  c.groups = 5;
  ExpectRefused(t, c, "placement.groups is 5");
  c.groups = 0;
  ExpectRefused(t, c, "placement.groups is 0");
}

TEST(Placement, ThreadBudgetSources) {
  Topology t = Synth("pack:2 numa:1 core:4 pu:2");
  PlacementConfig c;
  Plan auto_plan = PlanPlacement(t, c, nullptr);
  EXPECT_NE(auto_plan.threads_source.find("auto"), std::string::npos);
  // OMP_NUM_THREADS is the budget when the config does not set threads_per_group.
  Plan omp = PlanPlacement(t, c, "3");
  EXPECT_EQ(omp.groups[0].cpus.size(), 3u);
  EXPECT_EQ(omp.threads_source, "OMP_NUM_THREADS=3");
  // The config wins when it sets threads_per_group, even to auto.
  c.threads_per_group = 2;
  c.threads_per_group_set = true;
  Plan cfg = PlanPlacement(t, c, "3");
  EXPECT_EQ(cfg.groups[0].cpus.size(), 2u);
  EXPECT_EQ(cfg.threads_source, "threads_per_group");
  c.threads_per_group.reset();
  Plan cfg_auto = PlanPlacement(t, c, "3");
  EXPECT_EQ(cfg_auto.groups[0].cpus.size(), 4u);
  PlacementConfig fresh;
  ExpectRefused(t, fresh, "OMP_NUM_THREADS='many'", "many");
  ExpectRefused(t, fresh, "OMP_NUM_THREADS='0'", "0");
}

TEST(Placement, BudgetLargerThanDomainIsRefused) {
  Topology t = Synth("pack:2 numa:1 core:4 pu:2");
  PlacementConfig c;
  c.threads_per_group = 5;
  c.threads_per_group_set = true;
  ExpectRefused(t, c, "package 0 has 4 usable core(s)");
  c.hyperthreads = true;  // 8 hardware threads per package: 5 fits
  EXPECT_EQ(PlanPlacement(t, c, nullptr).groups[0].cpus.size(), 5u);
  c.threads_per_group = 9;
  ExpectRefused(t, c, "8 usable hardware thread(s)");
}

// Issue 15: OMP_NUM_THREADS above the cores was a hard error; it is set for every library of a
// job, so the plan takes the domain's cores and warns, showing the plan (as PyTorch warns).
TEST(Placement, OmpNumThreadsAboveTheCoresIsCappedWithAWarning) {
  Topology t = Synth("pack:2 numa:1 core:4 pu:2");
  const Plan p = PlanPlacement(t, PlacementConfig{}, "17");
  ASSERT_EQ(p.groups.size(), 2u);
  EXPECT_EQ(p.groups[0].cpus.size(), 4u);
  EXPECT_EQ(p.groups[1].cpus.size(), 4u);
  ASSERT_EQ(p.warnings.size(), 2u);
  EXPECT_NE(p.warnings[0].find("OMP_NUM_THREADS=17 asks for more worker threads than package 0 "
                               "has usable cores (4): group 0 runs 4 on CPUs 0,2,4,6"),
            std::string::npos)
      << p.warnings[0];
  // A list is read as OpenMP does: its first level is the budget.
  EXPECT_EQ(PlanPlacement(t, PlacementConfig{}, "3,2").groups[0].cpus.size(), 3u);
  EXPECT_TRUE(PlanPlacement(t, PlacementConfig{}, "3,2").warnings.empty());
}

TEST(Placement, CommThreadsAreTakenFromTheEndOfTheDomain) {
  Topology t = Synth("pack:2 numa:1 core:4 pu:2");
  PlacementConfig c;
  c.comm_threads = 1;
  Plan p = PlanPlacement(t, c, nullptr);
  ASSERT_EQ(p.groups.size(), 2u);
  EXPECT_EQ(p.groups[0].cpus, (std::vector<int>{0, 2, 4}));
  EXPECT_EQ(p.groups[0].comm_cpus, (std::vector<int>{6}));
  EXPECT_EQ(p.groups[1].comm_cpus, (std::vector<int>{14}));
  ExpectDisjoint(p);
  c.comm_threads = 4;
  ExpectRefused(t, c, "no core would be left for compute");
  c.comm_threads = -1;
  ExpectRefused(t, c, "comm_threads is -1");
}

TEST(Placement, SncSocketGroupsWarnNumaGroupsDoNot) {
  Topology t = Synth("pack:2 numa:2 l3:1 core:4 pu:1");
  Plan by_socket = PlanPlacement(t, PlacementConfig{}, nullptr);
  ASSERT_EQ(by_socket.groups.size(), 2u);
  EXPECT_EQ(by_socket.groups[0].numa_nodes_spanned, (std::vector<int>{0, 1}));
  ASSERT_EQ(by_socket.warnings.size(), 2u);
  EXPECT_NE(by_socket.warnings[0].find("NUMA nodes 0,1"), std::string::npos);
  PlacementConfig c;
  c.group_by = GroupBy::kNuma;
  Plan by_numa = PlanPlacement(t, c, nullptr);
  ASSERT_EQ(by_numa.groups.size(), 4u);
  EXPECT_TRUE(by_numa.warnings.empty());
  for (int g = 0; g < 4; ++g) {
    EXPECT_EQ(by_numa.groups[g].numa_node, g);
    EXPECT_EQ(by_numa.groups[g].cpus.size(), 4u);
  }
  c.group_by = GroupBy::kL3;
  EXPECT_EQ(PlanPlacement(t, c, nullptr).groups.size(), 4u);
}

// Found by fuzz_topology in CI, and true of 7 of the hwloc test-suite machines: NUMA nodes that
// share CPUs (KNL's DDR and MCDRAM nodes, both attached to the package) got one group each, so
// group_by: numa pinned two groups on the same cores. The CPUs now go to the first node; the
// other node gets no group, and the plan says why.
TEST(Placement, NumaNodesSharingCpusGetOneGroup) {
  test::TempDir dir;
  const std::string path = dir.path() + "/knl.xml";
  const std::string input =
      test::Slurp(std::string(CPUTRAIN_SOURCE_DIR) +
                  "/tests/fuzz/regressions/topology/numa-nodes-sharing-cpus-got-a-group-each.bin");
  ASSERT_GT(input.size(), 8u);
  std::ofstream(path, std::ios::binary) << input.substr(8);  // 8 knob bytes, then the XML
  Topology t = LoadTopology("xml:" + path);
  ASSERT_EQ(t.numa_nodes.size(), 2u);
  ASSERT_EQ(t.numa_nodes[0].cpus, t.numa_nodes[1].cpus);
  PlacementConfig c;
  c.group_by = GroupBy::kNuma;
  c.hyperthreads = true;
  Plan p = PlanPlacement(t, c, nullptr);
  ASSERT_EQ(p.groups.size(), 1u);
  ExpectDisjoint(p);
  EXPECT_EQ(p.groups[0].domain, "NUMA node 0");
  EXPECT_EQ(p.groups[0].numa_node, 0);
  EXPECT_EQ(p.groups[0].cpus.size(), t.numa_nodes[0].cpus.size());
  ASSERT_EQ(p.warnings.size(), 1u);
  EXPECT_NE(p.warnings[0].find("NUMA node 1 shares its CPUs with NUMA node 0"), std::string::npos)
      << p.warnings[0];
  c.groups = 2;
  ExpectRefused(t, c, "only 1 numa domain(s) this process may use");
}

TEST(Placement, L3GroupingNeedsL3Objects) {
  PlacementConfig c;
  c.group_by = GroupBy::kL3;
  ExpectRefused(Synth("pack:2 numa:1 core:2 pu:1"), c, "reports no L3 caches");
  Plan p = PlanPlacement(Synth("pack:1 numa:1 l3:4 core:2 pu:1"), c, nullptr);
  EXPECT_EQ(p.groups.size(), 4u);
  ExpectDisjoint(p);
}

TEST(Placement, ExplicitCpuLists) {
  Topology t = Synth("pack:2 numa:1 core:4 pu:1");
  PlacementConfig c;
  c.cpus = {{0, 1, 2, 3}, {4, 5, 6, 7}};
  Plan p = PlanPlacement(t, c, "2");  // explicit lists beat OMP_NUM_THREADS too
  ASSERT_EQ(p.groups.size(), 2u);
  EXPECT_EQ(p.groups[1].cpus, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(p.groups[1].numa_node, 1);
  EXPECT_EQ(p.threads_source, "cpus");
  c.comm_threads = 1;
  Plan q = PlanPlacement(t, c, nullptr);
  EXPECT_EQ(q.groups[0].cpus, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(q.groups[0].comm_cpus, (std::vector<int>{3}));
  // A group spanning two sockets' nodes is a warning, not an error.
  PlacementConfig span;
  span.cpus = {{3, 4}};
  Plan s = PlanPlacement(t, span, nullptr);
  ASSERT_EQ(s.warnings.size(), 1u);
  EXPECT_NE(s.warnings[0].find("NUMA nodes 0,1"), std::string::npos);
}

TEST(Placement, ExplicitCpuListRefusals) {
  Topology t = Synth("pack:2 numa:1 core:4 pu:1");
  PlacementConfig c;
  c.cpus = {{0, 1}, {999}};
  ExpectRefused(t, c, "names CPU 999, which does not exist");
  c.cpus = {{0, 1}, {1, 2}};
  ExpectRefused(t, c, "CPU 1 is in two groups: placement.cpus[0] and placement.cpus[1]");
  c.cpus = {{0, 0}};
  ExpectRefused(t, c, "lists CPU 0 twice");
  c.cpus = {{0, 1}, {}};
  ExpectRefused(t, c, "placement.cpus[1] is empty");
  c.cpus = {{0}, {1}};
  c.comm_threads = 1;
  ExpectRefused(t, c, "zero worker threads");
}

TEST(Placement, CpusOutsideTheAllowedCpusetAreRefusedAndTheirDomainsSkipped) {
  test::TempDir dir;
  const std::string path = dir.path() + "/m.xml";
  // 2 packages x 2 cores; this process may only use package 1 (CPUs 2,3), as when mpirun binds
  // one process per socket.
  std::ofstream(path) << test::WithAllowedCpuset(test::SyntheticXml("pack:2 numa:1 core:2 pu:1"),
                                                 "0x0000000c");
  Topology t = LoadTopology("xml:" + path);
  Plan p = PlanPlacement(t, PlacementConfig{}, nullptr);
  ASSERT_EQ(p.groups.size(), 1u);
  EXPECT_EQ(p.groups[0].domain, "package 1");
  EXPECT_EQ(p.groups[0].cpus, (std::vector<int>{2, 3}));
  PlacementConfig c;
  c.cpus = {{0, 2}};
  ExpectRefused(t, c, "CPU 0, which is outside this process's allowed cpuset (2-3)");
  PlacementConfig two;
  two.groups = 2;
  ExpectRefused(t, two, "only 1 socket domain(s) this process may use");
}

// Regression: planning visited every core of the machine for every domain, and looked each
// PU up by a linear search: cubic in the PUs on a machine of many one-core domains (a 40k-PU
// synthetic machine took 75 s, 19 s of it in hwloc). Now linear: 4096 groups plan in
// milliseconds (the old planner took minutes here); the 1 s bound leaves room for a busy host.
TEST(Placement, ManySmallSocketsWereQuadraticToPlan) {
  Topology t = Synth("pack:32 numa:128 core:1 pu:1");
  PlacementConfig c;
  c.group_by = GroupBy::kNuma;
  const auto start = std::chrono::steady_clock::now();
  Plan p = PlanPlacement(t, c, nullptr);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(p.groups.size(), 4096u);
  EXPECT_EQ(p.groups[4095].cpus, std::vector<int>{4095});
  ExpectDisjoint(p);
  EXPECT_LT(seconds, 1.0);
}

TEST(Placement, JsonShape) {
  Topology t = Synth("pack:2 numa:1 core:4 pu:2");
  nlohmann::json j = PlanToJson(PlanPlacement(t, PlacementConfig{}, nullptr));
  ASSERT_EQ(j["groups"].size(), 2u);
  for (const auto& g : j["groups"]) {
    EXPECT_TRUE(g.contains("cpus"));
    EXPECT_EQ(g["threads"], 4);
    EXPECT_TRUE(g.contains("numa_node"));
    EXPECT_TRUE(g.contains("comm_cpus"));
  }
  EXPECT_EQ(j["simulated"], true);
}

// mpirun -n 1 bound the process to a core of a 4-core cpuset (its default --bind-to core):
// issue 15's `mpirun -n 1 cputrain-numa train` that trained on CPU 0 only.
Topology BoundToFirstCore() {
  Topology t = Synth("pack:1 numa:1 core:4 pu:1");
  t.simulated = false;  // ReviewBinding judges a real machine's binding; no OS call is made here
  for (Pu& pu : t.pus) pu.allowed = pu.os_index == 0;
  return t;
}

TEST(LaunchBinding, OneRankUnderMpirunsDefaultBindingWidensAndNamesTheFlag) {
  const Topology t = BoundToFirstCore();
  const BindingReview r = ReviewBinding(t, Launch{"mpirun", 1, ""});
  EXPECT_TRUE(r.widen);
  EXPECT_NE(r.warning.find("bound this process to CPU(s) 0"), std::string::npos) << r.warning;
  EXPECT_NE(r.warning.find("cpuset is 0-3: planning over 0-3"), std::string::npos) << r.warning;
  EXPECT_NE(r.warning.find("`--bind-to none`"), std::string::npos) << r.warning;
  Topology widened = t;
  widened.simulated = true;  // AllowWholeCpuset: the plan only, no OS binding of synthetic CPUs
  AllowWholeCpuset(widened);
  EXPECT_EQ(PlanPlacement(widened, PlacementConfig{}, nullptr).groups[0].cpus,
            (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(PlanPlacement(t, PlacementConfig{}, nullptr).groups[0].cpus, std::vector<int>{0});
}

TEST(LaunchBinding, ChosenBindingsAreKept) {
  const Topology t = BoundToFirstCore();
  // taskset/numactl outside a launcher: the user's choice, silently.
  EXPECT_FALSE(ReviewBinding(t, Launch{}).widen);
  EXPECT_TRUE(ReviewBinding(t, Launch{}).warning.empty());
  // An explicit --bind-to: kept, with a warning naming the idle CPUs' fix.
  const BindingReview asked = ReviewBinding(t, Launch{"mpirun", 1, "core"});
  EXPECT_FALSE(asked.widen);
  EXPECT_NE(asked.warning.find("(--bind-to core)"), std::string::npos) << asked.warning;
  EXPECT_NE(asked.warning.find("planning on 0 as asked"), std::string::npos) << asked.warning;
  // Several ranks on the host: each plans its own binding (the trainer checks the overlap).
  EXPECT_FALSE(ReviewBinding(t, Launch{"mpirun", 2, ""}).widen);
  // Bound to the whole cpuset (--bind-to none), or a simulated machine: nothing to say.
  Topology whole = t;
  for (Pu& pu : whole.pus) pu.allowed = true;
  EXPECT_TRUE(ReviewBinding(whole, Launch{"mpirun", 1, ""}).warning.empty());
  Topology sim = t;
  sim.simulated = true;
  EXPECT_FALSE(ReviewBinding(sim, Launch{"mpirun", 1, ""}).widen);
}

}  // namespace
}  // namespace cputrain::topo
