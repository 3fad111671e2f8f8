// The placement planner: from a Topology and the `placement` config section, the list of
// replica groups — each with its worker CPUs (one pinned worker thread per CPU), its NUMA node
// for memory, and the CPUs reserved for its communication threads.
//
// Domains: group_by socket (default) makes one domain per package, numa one per NUMA node, l3
// one per L3 cache. Domains with no allowed CPU are skipped (a process started by
// `mpirun --map-by socket` sees only its socket), so each process plans its share. groups: N
// takes the first N domains. In a domain the CPUs are taken core by core: the first allowed PU
// of each core, or every allowed PU with hyperthreads: true. comm_threads cores at the end of
// the domain are set aside for communication; the compute budget comes from threads_per_group,
// else OMP_NUM_THREADS, else all remaining cores. An explicit `cpus` list overrides all that.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "topology/topology.h"

namespace cputrain::topo {

enum class GroupBy { kSocket, kNuma, kL3 };

struct PlacementConfig {
  GroupBy group_by = GroupBy::kSocket;
  std::optional<int> groups;             // nullopt = auto (every domain)
  std::optional<int> threads_per_group;  // nullopt = auto
  bool threads_per_group_set = false;    // the config named threads_per_group (even as auto)
  bool hyperthreads = false;
  int comm_threads = 0;
  std::vector<std::vector<int>> cpus;  // explicit OS CPU lists, one per group; overrides the rest
};

struct Group {
  int index = 0;
  std::string domain;                   // "package 0", "NUMA node 1", "L3 2", "cpus[0]"
  std::vector<int> cpus;                // worker CPUs (OS indexes), one worker thread each
  std::vector<int> comm_cpus;           // CPUs reserved for communication threads
  int numa_node = -1;                   // OS index of the node that holds the group's memory
  std::vector<int> numa_nodes_spanned;  // OS indexes of every node its CPUs are on
};

struct Plan {
  std::vector<Group> groups;
  // Where the per-group thread budget came from: "cpus" (explicit lists),
  // "threads_per_group", "OMP_NUM_THREADS=N" or "auto (all physical cores)".
  std::string threads_source;
  std::vector<std::string> warnings;  // e.g. a group whose CPUs span NUMA nodes
  bool simulated = false;

  int total_threads() const;
};

// Plans the placement. `omp_num_threads` is the value of OMP_NUM_THREADS or nullptr if unset.
// Throws InputError (exit 2) naming the problem and the fix for: a CPU that does not exist or
// is outside the allowed cpuset, a CPU in two groups, a group with zero threads, more groups
// than domains, a budget larger than the domain, a machine with no domain of the asked kind.
Plan PlanPlacement(const Topology& topology, const PlacementConfig& config,
                   const char* omp_num_threads);

// {"groups": [{"index", "domain", "cpus", "threads", "numa_node", "comm_cpus",
//  "numa_nodes_spanned"}], "threads_source": .., "warnings": [..], "simulated": bool}
nlohmann::json PlanToJson(const Plan& plan);
std::string DescribePlan(const Plan& plan);

const char* GroupByName(GroupBy g);

}  // namespace cputrain::topo
