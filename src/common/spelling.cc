#include "common/spelling.h"

#include <algorithm>

namespace cputrain {

std::size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string ClosestWord(const std::string& got, const std::vector<std::string>& valid) {
  std::string best;
  std::size_t best_d = 3;  // suggest only close misspellings
  for (const std::string& v : valid) {
    const std::size_t d = EditDistance(got, v);
    if (d < best_d) best_d = d, best = v;
  }
  return best;
}

}  // namespace cputrain
