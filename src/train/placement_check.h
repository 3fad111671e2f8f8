// train/placement_check: the placement of every process of a multi-node run, gathered to all,
// and the check that no two processes on one host pin a worker to the same CPU — which would
// halve both silently (e.g. mpirun --bind-to none with two processes per machine: each plans
// the whole box).
#pragma once

#include <nlohmann/json.hpp>

#include "train/distributed.h"

namespace cputrain::train {

// Adds "rank" and "host" to this process's placement `mine`, gathers every rank's (rank order)
// and returns `mine` with "ranks": [...]. Every rank gets the same list, so every rank refuses
// alike when CheckNoSharedCpus throws.
nlohmann::json GatherPlacement(Distributed& dist, nlohmann::json mine);

// ranks: [{"rank", "host", "simulated", "groups": [{"cpus": [...]}, ...]}, ...]. Throws
// InputError naming both ranks, the host and the CPU when two non-simulated ranks on one host
// pin the same CPU.
void CheckNoSharedCpus(const nlohmann::json& ranks);

}  // namespace cputrain::train
