// Topology loading on synthetic machines of 1, 2, 4 and 8 sockets, with SMT and with two NUMA
// nodes per package (SNC / NPS2 shapes), XML round trips, and bad specs.
#include "topology/topology.h"

#include <gtest/gtest.h>
#include <hwloc.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "common/error.h"
#include "test_util.h"

namespace cputrain::topo {
namespace {

struct Shape {
  const char* desc;
  std::size_t packages, numa, l3, cores, pus;
};

class SyntheticShapes : public ::testing::TestWithParam<Shape> {};

TEST_P(SyntheticShapes, CountsAndMembership) {
  const Shape s = GetParam();
  Topology t = LoadTopology(std::string("synthetic:") + s.desc);
  EXPECT_TRUE(t.simulated);
  EXPECT_EQ(t.packages.size(), s.packages);
  EXPECT_EQ(t.numa_nodes.size(), s.numa);
  EXPECT_EQ(t.l3s.size(), s.l3);
  EXPECT_EQ(t.cores.size(), s.cores);
  EXPECT_EQ(t.pus.size(), s.pus);
  EXPECT_EQ(t.AllowedCpus().size(), s.pus);  // synthetic machines allow every CPU
  // Every PU belongs to exactly one core, package and NUMA node, consistently.
  std::set<int> seen;
  for (const Pu& pu : t.pus) {
    EXPECT_TRUE(seen.insert(pu.os_index).second) << "duplicate PU " << pu.os_index;
    ASSERT_GE(pu.core, 0);
    ASSERT_GE(pu.package, 0);
    ASSERT_GE(pu.numa, 0);
    EXPECT_EQ(t.cores[pu.core].package, pu.package);
    EXPECT_EQ(t.numa_nodes[pu.numa].package, pu.package);
  }
  // Cores have pus/cores SMT siblings each.
  for (const Core& c : t.cores) EXPECT_EQ(c.pus.size(), s.pus / s.cores);
  // Packages list their NUMA nodes; every node is in one package.
  std::size_t nodes_in_packages = 0;
  for (const Package& p : t.packages) nodes_in_packages += p.numa_nodes.size();
  EXPECT_EQ(nodes_in_packages, s.numa);
}

INSTANTIATE_TEST_SUITE_P(Machines, SyntheticShapes,
                         ::testing::Values(Shape{"pack:1 core:2 pu:1", 1, 1, 0, 2, 2},
                                           Shape{"pack:2 numa:1 l3:1 core:8 pu:2", 2, 2, 2, 16, 32},
                                           Shape{"pack:2 numa:1 core:4 pu:2", 2, 2, 0, 8, 16},
                                           Shape{"pack:4 numa:1 l3:2 core:2 pu:1", 4, 4, 8, 16, 16},
                                           Shape{"pack:8 numa:1 core:2 pu:2", 8, 8, 0, 16, 32},
                                           // SNC / NPS2: two NUMA nodes per package, an L3 per node
                                           Shape{"pack:2 numa:2 l3:1 core:4 pu:2", 2, 4, 4, 16,
                                                 32}));

TEST(Topology, ThisMachine) {
  Topology t = LoadTopology("this");
  EXPECT_FALSE(t.simulated);
  EXPECT_GE(t.packages.size(), 1u);
  EXPECT_GE(t.numa_nodes.size(), 1u);
  EXPECT_GE(t.cores.size(), 1u);
  EXPECT_GE(t.pus.size(), t.cores.size());
  EXPECT_FALSE(t.AllowedCpus().empty());
  for (int cpu : t.AllowedCpus()) EXPECT_NE(t.FindPu(cpu), nullptr);
}

TEST(Topology, SncNodesBelongToTheirPackage) {
  Topology t = LoadTopology("synthetic:pack:2 numa:2 core:2 pu:1");
  ASSERT_EQ(t.packages.size(), 2u);
  EXPECT_EQ(t.packages[0].numa_nodes, (std::vector<int>{0, 1}));
  EXPECT_EQ(t.packages[1].numa_nodes, (std::vector<int>{2, 3}));
  EXPECT_EQ(t.numa_nodes[3].cpus, (std::vector<int>{6, 7}));
}

TEST(Topology, XmlRoundTripKeepsShapeAndAllowedSet) {
  test::TempDir dir;
  // Export a synthetic machine with hwloc, restrict its allowed cpuset to CPUs 0-2, load it back.
  std::string xml = test::SyntheticXml("pack:2 numa:1 core:2 pu:1");
  xml = test::WithAllowedCpuset(xml, "0x00000007");
  std::string path = dir.path() + "/m.xml";
  std::ofstream(path) << xml;
  Topology t = LoadTopology("xml:" + path);
  EXPECT_TRUE(t.simulated);
  EXPECT_EQ(t.packages.size(), 2u);
  EXPECT_EQ(t.numa_nodes.size(), 2u);
  EXPECT_EQ(t.pus.size(), 4u);
  EXPECT_EQ(t.AllowedCpus(), (std::vector<int>{0, 1, 2}));
  EXPECT_FALSE(t.FindPu(3)->allowed);
}

TEST(Topology, BadSpecsAreInputErrors) {
  EXPECT_THROW(LoadTopology("synthetic:pack:two"), InputError);
  EXPECT_THROW(LoadTopology("xml:/nonexistent/machine.xml"), InputError);
  EXPECT_THROW(LoadTopology("sockets=2"), InputError);
  try {
    LoadTopology("sockets=2");
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("sockets=2"), std::string::npos);
    EXPECT_NE(e.hint().find("synthetic:"), std::string::npos);
  }
  test::TempDir dir;
  std::ofstream(dir.path() + "/bad.xml") << "<not hwloc>";
  EXPECT_THROW(LoadTopology("xml:" + dir.path() + "/bad.xml"), InputError);
}

// The message of the InputError LoadTopology(spec) throws, or "(no error)".
std::string LoadError(const std::string& spec) {
  try {
    LoadTopology(spec);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

// Regression: 'synthetic:pack:100000 core:100000 pu:100' ran for minutes inside hwloc. The
// description's size is now computed first and refused above kMaxTopologyPus.
TEST(Topology, HugeSyntheticDescriptionRanForMinutes) {
  auto pus = [](const std::string& d) { return MeasureSynthetic(d).pus; };
  EXPECT_EQ(pus("pack:2 numa:1 l3:1 core:8 pu:2"), 32);
  EXPECT_EQ(pus("  pack:2   core:4\tpu:2 "), 16);
  EXPECT_EQ(pus("Package:2 [numa(memory=1GB)] Core:3(indexes=0,2,4 ) PU:2"), 12);
  EXPECT_EQ(pus("2 3 4"), 24);
  EXPECT_EQ(pus("pack:100000 core:100000 pu:100"), kMaxTopologyPus + 1);
  EXPECT_EQ(pus("pack:99999999999999999999999"), kMaxTopologyPus + 1);
  EXPECT_EQ(pus("pack:16 core:1024 pu:1"), 16384);
  EXPECT_EQ(MeasureSynthetic("pack:2 core:1000 pu:2").widest, 1000);
  // Found by fuzz_topology: a count followed by junk is read as hwloc's strtoul reads it, and a
  // NUL byte (hwloc would stop reading there, past our measure) is refused.
  EXPECT_EQ(pus("555555\x04junk"), kMaxTopologyPus + 1);
  EXPECT_NE(LoadError(std::string("synthetic:555555") + '\0' + " 1").find("holds a NUL byte"),
            std::string::npos);
  // hwloc's time is quadratic in a level's width: 2048 cores side by side are refused too.
  std::string wide = LoadError("synthetic:pack:1 core:2048 pu:1");
  EXPECT_NE(wide.find("a level of 2048 objects under one parent, more than the 1024"),
            std::string::npos)
      << wide;
  const std::string e = LoadError("synthetic:pack:100000 core:100000 pu:100");
  EXPECT_NE(e.find("describes more than 16384 PUs"), std::string::npos) << e;
}

// Regression: an empty synthetic description and xml:/dev/zero got misleading messages (a
// --set mapping error; "no such file").
TEST(Topology, EmptySyntheticAndDeviceXmlAreNamed) {
  std::string e = LoadError("synthetic:");
  EXPECT_NE(e.find("the synthetic description is empty"), std::string::npos) << e;
  e = LoadError("xml:/dev/zero");
  EXPECT_NE(e.find("'/dev/zero' is not a regular file (a character device)"), std::string::npos)
      << e;
  test::TempDir dir;
  std::ofstream(dir.path() + "/bad.xml") << "<not hwloc>";
  e = LoadError("xml:" + dir.path() + "/bad.xml");
  EXPECT_NE(e.find("is not valid hwloc XML"), std::string::npos) << e;
}

TEST(Topology, FormatCpuList) {
  EXPECT_EQ(Topology::FormatCpuList({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(Topology::FormatCpuList({5}), "5");
  EXPECT_EQ(Topology::FormatCpuList({}), "(none)");
}

TEST(Topology, JsonHasTheDocumentedCounts) {
  nlohmann::json j = TopologyToJson(LoadTopology("synthetic:pack:2 numa:1 core:4 pu:2"));
  EXPECT_EQ(j["packages"], 2);
  EXPECT_EQ(j["numa_nodes"], 2);
  EXPECT_EQ(j["cores"], 8);
  EXPECT_EQ(j["pus"], 16);
  EXPECT_EQ(j["simulated"], true);
}

}  // namespace
}  // namespace cputrain::topo
