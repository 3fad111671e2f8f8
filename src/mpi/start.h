// Internal to mpi/: the one function that differs between a build with the bridge
// (ompi_bridge.cc) and one without (no_mpi.cc). bridge.cc decides whether the bridge is wanted
// and calls it only then.
#pragma once

#include <memory>

#include "mpi/bridge.h"

namespace cputrain::mpi {

// Starts the bridge (the run is distributed: launched by mpirun, or mpi.enabled: on).
std::unique_ptr<Bridge> StartBridge(const MpiConfig& config, Bridge::ExitProcess exit_process);

}  // namespace cputrain::mpi
