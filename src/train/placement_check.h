// train/placement_check: the placement of every process of a multi-node run, gathered to all,
// and the check that no two processes on one host pin a worker to the same CPU — which would
// halve both silently (e.g. mpirun --bind-to none with two processes per machine: each plans
// the whole box).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "comm/distributed.h"

namespace cputrain::train {

// Adds "rank" and "host" to this process's placement `mine`, gathers every rank's (rank order)
// and returns `mine` with "ranks": [...]. Every rank gets the same list, so every rank refuses
// alike when CheckNoSharedCpus throws.
nlohmann::json GatherPlacement(comm::Distributed& dist, nlohmann::json mine);

// ranks: [{"rank", "host", "simulated", "groups": [{"cpus": [...]}, ...]}, ...]. Throws
// InputError naming both ranks, the host and the CPU when two non-simulated ranks on one host
// pin the same CPU.
void CheckNoSharedCpus(const nlohmann::json& ranks);

// ranks: as above, each with "allowed_cpus" (its binding) and "cpuset_cpus". For every host with
// several non-simulated ranks whose bindings together leave CPUs of the host's cpuset unused
// (mpirun's default --bind-to core with ppr:2:node on a 64-core host: 62 idle cores), a warning
// naming the host, the idle CPUs and the mpirun flags that use them. (A host with one rank is
// judged by that rank itself: topo::ReviewBinding.)
std::vector<std::string> UnusedCpuWarnings(const nlohmann::json& ranks);

}  // namespace cputrain::train
