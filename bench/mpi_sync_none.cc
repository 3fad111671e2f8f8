// A build without MPI (CPUTRAIN_MPI=OFF, or auto with no MPI found) has no mpi-sync suite:
// `bench --help` does not list it and `bench all` does not run it.
#include "bench/bench.h"

namespace cputrain::bench {

std::unique_ptr<Suite> MakeMpiSyncSuite() { return nullptr; }

}  // namespace cputrain::bench
