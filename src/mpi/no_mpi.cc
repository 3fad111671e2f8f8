// The bridge of a build without MPI (CPUTRAIN_MPI=OFF, or auto with no MPI library found): the
// binary links no libmpi, and a run that wants the bridge is refused before it trains. Under
// mpirun every process would otherwise train alone on the whole data and write the same
// out_dir.
#include <fmt/format.h>

#include "common/error.h"
#include "mpi/start.h"

namespace cputrain::mpi {

bool BuiltWithMpi() { return false; }

std::unique_ptr<Bridge> StartBridge(const MpiConfig& config, Bridge::ExitProcess) {
  const char* var = MpiLauncherVariable();
  const std::string why = config.enabled == MpiMode::kOn || var == nullptr
                              ? std::string("mpi.enabled is on")
                              : fmt::format("it was launched by mpirun ({} is set)", var);
  throw InputError(
      fmt::format("this cputrain-numa was built without MPI (CPUTRAIN_MPI), but {}: the "
                  "processes of a multi-node run cannot reach each other",
                  why),
      "rebuild with MPI: install libopenmpi-dev (bash scripts/install-deps.sh --build --mpi), "
      "then cmake -DCPUTRAIN_MPI=ON; or run it without mpirun and with mpi.enabled auto or off");
}

}  // namespace cputrain::mpi
