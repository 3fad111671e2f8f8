// The MPI bridge's own settings (the `mpi:` section of the config, docs/config.md), apart from
// the whole Config so that the bridge depends on nothing else (no hwloc, no YAML).
#pragma once

namespace cputrain {

enum class MpiMode { kAuto, kOn, kOff };

struct MpiConfig {
  MpiMode enabled = MpiMode::kAuto;  // auto: on when launched by mpirun
  double watchdog_seconds = 60.0;    // a silent peer for this long aborts the run
};

}  // namespace cputrain
