// topology/: the machine as cputrain-numa sees it, read through hwloc.
//
// A Topology is a plain value: packages (sockets), NUMA nodes with their distance matrix, L3
// caches, cores and PUs (hardware threads, by OS index), and the CPUs this process may use
// (taskset, cgroups, an mpirun cpuset). Everything downstream (the placement planner, the
// worker pools, the allocator) reads this value and nothing else, so the same code runs on the
// real machine and on a simulated one:
//
//   "this"                      the machine we run on (default)
//   "synthetic:<description>"   an hwloc synthetic machine, e.g. "pack:2 numa:1 l3:1 core:8 pu:2"
//   "xml:<file>"                an `lstopo --of xml` export of another machine
//
// A synthetic or XML topology is *simulated*: plans are made on it and training runs on it,
// but threads are not pinned and memory is not bound (the caller says so once).
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <unordered_map>
#include <vector>

namespace cputrain::topo {

// Indexes into Topology's vectors are "logical" (0..n-1 in hwloc's order); fields named os_*
// and the CPU lists are the operating system's numbers (what taskset and /proc use).
struct Pu {
  int os_index = -1;
  int core = -1;          // index into Topology::cores
  int package = -1;       // index into Topology::packages
  int numa = -1;          // index into Topology::numa_nodes (-1 if no node covers it)
  int l3 = -1;            // index into Topology::l3s (-1 if the machine reports no L3)
  bool allowed = true;    // this process may run on it: in the cpuset and in its binding
  bool in_cpuset = true;  // in the cpuset (cgroup, container), whatever the process's binding
};

struct Core {
  int package = -1;
  int numa = -1;
  int l3 = -1;
  std::vector<int> pus;  // OS indexes of its hardware threads, SMT siblings in hwloc order
};

struct NumaNode {
  int os_index = -1;
  int package = -1;           // -1 if it spans packages or has no CPUs
  uint64_t memory_bytes = 0;  // as hwloc reports it (may differ from /proc/meminfo)
  std::vector<int> cpus;      // OS indexes
};

struct Package {
  int os_index = -1;
  std::vector<int> numa_nodes;  // indexes into Topology::numa_nodes
  std::vector<int> cpus;        // OS indexes
};

struct L3Cache {
  uint64_t size_bytes = 0;
  int package = -1;
  std::vector<int> cpus;  // OS indexes
};

struct Topology {
  std::string spec = "this";  // the spec it was loaded from
  bool simulated = false;     // synthetic or XML: no pinning, no memory binding
  std::vector<Package> packages;
  std::vector<NumaNode> numa_nodes;
  std::vector<L3Cache> l3s;
  std::vector<Core> cores;
  std::vector<Pu> pus;  // in hwloc's logical order
  // numa_distances[i][j]: relative latency from node i to node j as the firmware (SLIT) or the
  // XML reports it (10 = local). Empty when the source reports none (synthetic machines).
  std::vector<std::vector<uint64_t>> numa_distances;
  // OS index -> index into pus, for FindPu in O(1): the planner looks up every CPU of every
  // domain. Filled by LoadTopology; when empty, FindPu searches pus.
  std::unordered_map<int, int> pu_by_os;

  // The PU with this OS index, or nullptr.
  const Pu* FindPu(int os_index) const;
  // OS indexes of the allowed CPUs, ascending.
  std::vector<int> AllowedCpus() const;
  // OS indexes of the cpuset's CPUs (the cgroup's, as hwloc reads it), ascending: a superset of
  // AllowedCpus(); larger when a launcher or taskset narrowed this process's binding.
  std::vector<int> CpusetCpus() const;
  // "0-3,8,10-11": compact list form for messages.
  static std::string FormatCpuList(const std::vector<int>& cpus);
};

// The largest machine accepted, in PUs (hardware threads): above any single-image Linux server
// (distribution kernels are built for at most 8192 CPUs), and small enough that loading stays
// fast. hwloc's own time grows with the square of the PU count (measured on the 2-vCPU CI guest:
// 16384 PUs 7 s of CPU in hwloc-info, 65536 PUs over 2 minutes); our loading and planning are
// linear. A synthetic description is checked before hwloc builds it (a product of level counts
// such as "pack:100000 core:100000 pu:100" would take hwloc hours or all memory), an XML file or
// this machine after loading.
inline constexpr long long kMaxTopologyPus = 16384;
// The most children one object of a synthetic description may have ("core:1024"): hwloc's time
// grows with the square of a level's width (measured on the 2-vCPU CI guest with hwloc-info:
// 4096 siblings 2.7 s, 8192 siblings 20 s of CPU), so 65536 PUs as "pack:1 core:65536" would
// take hwloc an hour.
inline constexpr long long kMaxSyntheticArity = 1024;

// Loads a topology from a spec ("this", "synthetic:...", "xml:..."). Throws InputError naming
// the spec and what is wrong (unknown prefix, bad or empty synthetic description, more than
// kMaxTopologyPus PUs or a level wider than kMaxSyntheticArity, an XML path that is missing, not
// a regular file or not hwloc XML).
Topology LoadTopology(const std::string& spec);

// The size of a synthetic description ("pack:2 numa:1 core:8 pu:2"): the PUs it makes (the
// product of its level counts) and its widest level, both capped at kMaxTopologyPus + 1 (so
// they cannot overflow). Levels whose count it cannot read count as 1, left for hwloc to judge.
struct SyntheticSize {
  long long pus = 1, widest = 1;
};
SyntheticSize MeasureSynthetic(const std::string& description);

// How this process was started, as far as its CPU binding goes (docs/multi-node.md, "Binding").
struct Launch {
  std::string launcher;        // "mpirun" (Open MPI's environment), "" outside a launcher
  int local_ranks = 0;         // processes of the job on this host (OMPI_COMM_WORLD_LOCAL_SIZE)
  std::string binding_policy;  // mpirun's --bind-to as given ("core", "none"), "" = its default
};
// Reads OMPI_COMM_WORLD_LOCAL_SIZE and OMPI_MCA_hwloc_base_binding_policy (mpirun sets the
// latter only for an explicit --bind-to).
Launch LaunchFromEnv();

// What to do when the binding is narrower than the cpuset.
struct BindingReview {
  bool widen = false;   // plan over the whole cpuset (AllowWholeCpuset) instead of the binding
  std::string warning;  // "" = nothing to say
};
// The rules (docs/multi-node.md, "Binding"): outside a launcher, or on a simulated machine, a
// binding is the user's choice (taskset, numactl): kept, silently. Under mpirun with one rank on
// this host and mpirun's default binding (a core), the process widens to the cpuset and says so,
// naming --bind-to none. With an explicit --bind-to, or several ranks on the host, each rank
// keeps its own binding (ranks whose bindings overlap then pin the same CPUs, which the trainer
// refuses with exit 2); with one rank and an explicit binding narrower than the cpuset, a
// warning names the idle CPUs.
BindingReview ReviewBinding(const Topology& t, const Launch& launch);
// Makes every CPU of the cpuset allowed. On the real machine, also widens the process's
// binding (every thread) to the cpuset, so threads it starts are not confined to the launcher's
// core. Throws RuntimeError if the OS refuses.
void AllowWholeCpuset(Topology& t);
// ReviewBinding(t, LaunchFromEnv()), then AllowWholeCpuset when it says so; returns the warning
// for the caller to print ("" = none).
std::string AdoptLaunchBinding(Topology& t);

// {"packages": N, "numa_nodes": N, "l3_caches": N, "cores": N, "pus": N, "allowed_cpus": [..],
//  "simulated": bool, "source": spec, "numa": [{"os_index", "package", "cpus", "memory_bytes"}],
//  "distances": [[..]]}
nlohmann::json TopologyToJson(const Topology& t);
// Human summary, several lines.
std::string DescribeTopology(const Topology& t);

}  // namespace cputrain::topo
