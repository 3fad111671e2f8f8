// The list of benchmark suites: one line per suite, in `cputrain-numa bench --help` order.
#include "bench/bench.h"

namespace cputrain::bench {

std::unique_ptr<Suite> MakeCollectivesSuite();  // collectives_bench.cc

std::vector<std::unique_ptr<Suite>> MakeSuites() {
  std::vector<std::unique_ptr<Suite>> suites;
  suites.push_back(MakeCollectivesSuite());
  return suites;
}

}  // namespace cputrain::bench
