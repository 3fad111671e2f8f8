#include "bench/qa_rows.h"

#include <fmt/format.h>

#include <algorithm>
#include <random>

#include "common/error.h"
#include "model/transformer.h"

namespace cputrain::bench {

RandomQaRows::RandomQaRows(const model::Shape& shape, int B, int T, uint64_t seed, int windows)
    : B_(B), T_(T), windows_(windows), seed_(seed) {
  CPUTRAIN_CHECK(B > 0 && T >= 8 && windows > 0, "RandomQaRows: B > 0, T >= 8, windows > 0");
  const std::size_t n = static_cast<std::size_t>(windows) * static_cast<std::size_t>(B);
  const std::size_t Ts = static_cast<std::size_t>(T);
  const int pad = shape.pad_token >= 0 ? shape.pad_token : 0;
  ids_.assign(n * Ts, pad);
  types_.assign(n * Ts, 0);
  lengths_.resize(n);
  starts_.resize(n);
  ends_.resize(n);
  std::mt19937 rng(static_cast<std::mt19937::result_type>(seed));
  std::uniform_int_distribution<int> id(0, shape.V - 1);
  std::uniform_int_distribution<int> len((6 * T + 9) / 10, T);
  for (std::size_t f = 0; f < n; ++f) {
    const int length = len(rng);
    const int context = std::max(1, length / 3);  // first context position
    int* ids = ids_.data() + f * Ts;
    int* types = types_.data() + f * Ts;
    for (int t = 0; t < length; ++t) {
      ids[t] = id(rng);
      types[t] = t >= context ? 1 : 0;
    }
    const int start = std::uniform_int_distribution<int>(context, length - 1)(rng);
    const int end =
        std::uniform_int_distribution<int>(start, std::min(start + 29, length - 1))(rng);
    lengths_[f] = length;
    starts_[f] = start;
    ends_[f] = end;
  }
}

void RandomQaRows::LoadRows(std::size_t j, int row0, int rows, model::Activations& a) const {
  const std::size_t Ts = static_cast<std::size_t>(T_);
  const std::size_t w = static_cast<std::size_t>((planned_ + j) % static_cast<uint64_t>(windows_));
  for (int r = 0; r < rows; ++r) {
    const std::size_t f = w * static_cast<std::size_t>(B_) + static_cast<std::size_t>(row0 + r);
    std::copy_n(ids_.data() + f * Ts, Ts, a.inputs + static_cast<std::size_t>(r) * Ts);
    std::copy_n(types_.data() + f * Ts, Ts, a.types + static_cast<std::size_t>(r) * Ts);
    a.lengths[r] = lengths_[f];
    a.starts[r] = starts_[f];
    a.ends[r] = ends_[f];
  }
}

std::vector<train::ShardRecord> RandomQaRows::Identity() const {
  return {{fmt::format("bench:random-qa-features/seed={}/T={}", seed_, T_), lengths_.size()}};
}

double RandomQaRows::RealShare() const {
  double sum = 0;
  for (int l : lengths_) sum += l;
  return sum / (static_cast<double>(lengths_.size()) * T_);
}

std::string RandomQaRows::Describe() const {
  return fmt::format(
      "{} random QA features of T={} ({:.0f}% real tokens, the rest padding), {} "
      "micro-batches repeating",
      lengths_.size(), T_, 100 * RealShare(), windows_);
}

}  // namespace cputrain::bench
