// Bridge::Start: whether this run is distributed, decided the same way with or without MPI.
#include "mpi/bridge.h"

#include <cstdlib>

#include "common/log.h"
#include "mpi/start.h"

namespace cputrain::mpi {

const char* MpiLauncherVariable() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"}) {
    if (std::getenv(name) != nullptr) return name;
  }
  return nullptr;
}

bool LaunchedByMpi() { return MpiLauncherVariable() != nullptr; }

std::unique_ptr<Bridge> Bridge::Start(const MpiConfig& config, ExitProcess exit_process) {
  const bool on =
      config.enabled == MpiMode::kOn || (config.enabled == MpiMode::kAuto && LaunchedByMpi());
  if (!on) {
    if (config.enabled == MpiMode::kOff && LaunchedByMpi()) {
      log::Warn(
          "started by mpirun with mpi.enabled: off: every process trains alone and writes "
          "the same out_dir; set mpi.enabled to auto");
    }
    return nullptr;
  }
  return StartBridge(config, exit_process);
}

}  // namespace cputrain::mpi
