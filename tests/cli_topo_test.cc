// `cputrain-numa topo` end to end: the "done when" cases, run as a user would, checking
// exit codes, that --json prints exactly one JSON document, and that errors name the problem.
#include <gtest/gtest.h>
#include <sched.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "test_util.h"

namespace cputrain {
namespace {

nlohmann::json TopoJson(const std::vector<std::string>& extra,
                        const std::vector<std::string>& env = {}) {
  std::vector<std::string> args = {"topo", "--json"};
  args.insert(args.end(), extra.begin(), extra.end());
  test::CliResult r = test::RunCli(args, env);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out);  // throws if stdout is not exactly one JSON document
}

TEST(CliTopo, ThisMachineHasOneGroupWithEveryAllowedCore) {
  nlohmann::json j = TopoJson({});
  ASSERT_EQ(j["groups"].size(), j["topology"]["packages"].get<std::size_t>());
  EXPECT_EQ(j["simulated"], false);
  std::size_t threads = 0;
  for (const auto& g : j["groups"]) threads += g["threads"].get<std::size_t>();
  // One worker per physical core: on a machine without SMT that is every allowed CPU.
  if (j["topology"]["cores"] == j["topology"]["pus"]) {
    EXPECT_EQ(threads, j["topology"]["allowed_cpus"].size());
  }
}

TEST(CliTopo, TwoSimulatedSocketsGiveTwoDisjointGroups) {
  nlohmann::json j = TopoJson({"--topology", "synthetic:pack:2 numa:1 core:4 pu:2"});
  ASSERT_EQ(j["groups"].size(), 2u);
  std::set<int> cpus;
  for (const auto& g : j["groups"]) {
    EXPECT_EQ(g["threads"], 4);
    for (int c : g["cpus"]) EXPECT_TRUE(cpus.insert(c).second);
  }
  EXPECT_EQ(j["simulated"], true);
  EXPECT_EQ(j["topology"]["packages"], 2);
  nlohmann::json ht = TopoJson({"--topology", "synthetic:pack:2 numa:1 core:4 pu:2", "--set",
                                "placement.hyperthreads=true"});
  ASSERT_EQ(ht["groups"].size(), 2u);
  for (const auto& g : ht["groups"]) EXPECT_EQ(g["threads"], 8);
}

TEST(CliTopo, OmpNumThreadsIsTheBudgetAndSaysSo) {
  nlohmann::json j =
      TopoJson({"--topology", "synthetic:pack:2 numa:1 core:4 pu:1"}, {"OMP_NUM_THREADS=3"});
  EXPECT_EQ(j["groups"][0]["threads"], 3);
  EXPECT_EQ(j["threads_source"], "OMP_NUM_THREADS=3");
}

// The process's affinity mask is part of the allowed cpuset: a process started with taskset or
// bound by mpirun (--bind-to socket/core) plans only its CPUs.
TEST(CliTopo, AffinityMaskLimitsThePlan) {
  cpu_set_t saved;
  ASSERT_EQ(sched_getaffinity(0, sizeof(saved), &saved), 0);
  int first = -1;
  for (int c = 0; c < CPU_SETSIZE && first < 0; ++c) {
    if (CPU_ISSET(c, &saved)) first = c;
  }
  if (CPU_COUNT(&saved) < 2) GTEST_SKIP() << "needs 2 CPUs to restrict to one";
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);  // the child inherits it
  nlohmann::json j = TopoJson({});
  test::TempDir dir;
  std::ofstream(dir.path() + "/c.yaml")
      << "placement:\n  cpus: [[" << (first == 0 ? 1 : 0) << "]]\n";
  test::CliResult r = test::RunCli({"topo", "--config", dir.path() + "/c.yaml"});
  sched_setaffinity(0, sizeof(saved), &saved);
  EXPECT_EQ(j["topology"]["allowed_cpus"], nlohmann::json::array({first}));
  ASSERT_EQ(j["groups"].size(), 1u);
  EXPECT_EQ(j["groups"][0]["cpus"], nlohmann::json::array({first}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("outside this process's allowed cpuset"), std::string::npos) << r.err;
}

TEST(CliTopo, TypoedKeyExitsTwoNamingTheLine) {
  test::TempDir dir;
  const std::string cfg = dir.path() + "/bad.yaml";
  std::ofstream(cfg) << "placement:\n  group_by: socket\n  hyperthread: true\n";
  test::CliResult r = test::RunCli({"topo", "--config", cfg});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(cfg + ":3: unknown key 'hyperthread'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("did you mean 'hyperthreads'?"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty());
}

TEST(CliTopo, CpuThatDoesNotExistExitsTwoNamingTheCpu) {
  test::TempDir dir;
  const std::string cfg = dir.path() + "/cpus.yaml";
  std::ofstream(cfg) << "placement:\n  cpus: [[0], [999]]\n";
  test::CliResult r = test::RunCli({"topo", "--config", cfg});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("names CPU 999, which does not exist"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("hint:"), std::string::npos) << r.err;
}

TEST(CliTopo, UsageErrorsExitTwoAndHelpExitsZero) {
  EXPECT_EQ(test::RunCli({"topo", "--no-such-flag"}).exit_code, 2);
  EXPECT_EQ(test::RunCli({}).exit_code, 2);
  EXPECT_EQ(test::RunCli({"topo", "--help"}).exit_code, 0);
  test::CliResult r = test::RunCli({"topo", "--topology", "synthetic:bogus"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("synthetic:bogus"), std::string::npos) << r.err;
}

// `topo` says which precisions run natively; CPUTRAIN_DISABLE_BF16=1 (kernels/bf16.h's test
// hook) makes this CPU look like one without AVX512_BF16 or AMX.
TEST(CliTopo, PrintsWhichPrecisionsRunNatively) {
  __builtin_cpu_init();
  const bool cpu_bf16 = __builtin_cpu_supports("avx512bf16") != 0;
  nlohmann::json j = TopoJson({});
  EXPECT_EQ(j["precisions"]["fp32"], true);
  EXPECT_EQ(j["precisions"]["bf16"], cpu_bf16) << j["precisions"];
  nlohmann::json off = TopoJson({}, {"CPUTRAIN_DISABLE_BF16=1"});
  EXPECT_EQ(off["precisions"]["bf16"], false);
  test::CliResult r = test::RunCli({"topo"}, {"CPUTRAIN_DISABLE_BF16=1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("bf16 not native: missing AVX512_BF16"), std::string::npos) << r.out;
  r = test::RunCli({"topo"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(cpu_bf16 ? "bf16 native (AVX512_BF16" : "bf16 not native"),
            std::string::npos)
      << r.out;
}

// `topo` names the kernel bf16's products run on (kernels/bf16.h): auto's, one the environment
// or --set forces, or none with the reason; the tile model runs everywhere, bf16 forced off
// leaves none.
TEST(CliTopo, NamesTheBf16Kernel) {
  __builtin_cpu_init();
  const bool cpu_bf16 = __builtin_cpu_supports("avx512bf16") != 0;
  nlohmann::json j = TopoJson({});
  if (cpu_bf16) {
    EXPECT_TRUE(j["precisions"]["bf16_kernel"] == "vdpbf16ps" ||
                j["precisions"]["bf16_kernel"] == "amx")
        << j["precisions"];
  }
  j = TopoJson({}, {"CPUTRAIN_BF16_KERNEL=tile-model"});
  EXPECT_EQ(j["precisions"]["bf16_kernel"], "tile-model");
  EXPECT_NE(j["precisions"]["bf16_kernel_detail"].get<std::string>().find(
                "chosen by CPUTRAIN_BF16_KERNEL=tile-model"),
            std::string::npos)
      << j["precisions"];
  j = TopoJson({}, {"CPUTRAIN_DISABLE_BF16=1"});
  EXPECT_EQ(j["precisions"]["bf16_kernel"], "none");
  test::CliResult r = test::RunCli({"topo", "--set", "train.bf16_kernel=tile-model"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("bf16 products: tile-model"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("chosen by train.bf16_kernel"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace cputrain
