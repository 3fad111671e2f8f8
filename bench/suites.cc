// The list of benchmark suites: one line per suite, in `cputrain-numa bench --help` order (and
// the order `bench all` runs them: the yardsticks first, then what is measured against them).
#include <utility>

#include "bench/bench.h"

namespace cputrain::bench {

std::unique_ptr<Suite> MakeMemorySuite();       // memory_bench.cc
std::unique_ptr<Suite> MakeGemmSuite();         // gemm_bench.cc
std::unique_ptr<Suite> MakeCollectivesSuite();  // collectives_bench.cc
std::unique_ptr<Suite> MakeTrainSuite();        // train_bench.cc (its pieces: train_suite.h)
// mpi_sync_bench.cc; nullptr from mpi_sync_none.cc in a build without MPI
std::unique_ptr<Suite> MakeMpiSyncSuite();

std::vector<std::unique_ptr<Suite>> MakeSuites() {
  std::vector<std::unique_ptr<Suite>> suites;
  suites.push_back(MakeMemorySuite());
  suites.push_back(MakeGemmSuite());
  suites.push_back(MakeCollectivesSuite());
  suites.push_back(MakeTrainSuite());
  if (auto mpi_sync = MakeMpiSyncSuite()) suites.push_back(std::move(mpi_sync));
  return suites;
}

}  // namespace cputrain::bench
