// Small statistics over a benchmark's repetitions, for every program of bench/ (the suites, the
// MPI worker, alloc_bench): one definition, so that "median" means the same in all of them.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "common/error.h"

namespace cputrain::bench {

// Median of v (v non-empty; averages the two middle values for an even count).
inline double Median(std::vector<double> v) {
  CPUTRAIN_CHECK(!v.empty(), "Median of no values");
  const std::size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  const double hi = v[mid];
  if (v.size() % 2 == 1) return hi;
  const double lo = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid));
  return (lo + hi) / 2;
}

}  // namespace cputrain::bench
