// The list of benchmark suites: one line per suite, in `cputrain-numa bench --help` order (and
// the order `bench all` runs them: the yardsticks first, then what is measured against them).
#include "bench/bench.h"

namespace cputrain::bench {

std::unique_ptr<Suite> MakeMemorySuite();       // memory_bench.cc
std::unique_ptr<Suite> MakeGemmSuite();         // gemm_bench.cc
std::unique_ptr<Suite> MakeCollectivesSuite();  // collectives_bench.cc
std::unique_ptr<Suite> MakeTrainSuite();        // train_bench.cc
std::unique_ptr<Suite> MakeMpiSyncSuite();      // mpi_sync_bench.cc

std::vector<std::unique_ptr<Suite>> MakeSuites() {
  std::vector<std::unique_ptr<Suite>> suites;
  suites.push_back(MakeMemorySuite());
  suites.push_back(MakeGemmSuite());
  suites.push_back(MakeCollectivesSuite());
  suites.push_back(MakeTrainSuite());
  suites.push_back(MakeMpiSyncSuite());
  return suites;
}

}  // namespace cputrain::bench
