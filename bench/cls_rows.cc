#include "bench/cls_rows.h"

#include <fmt/format.h>

#include <algorithm>
#include <random>

#include "common/error.h"
#include "model/transformer.h"

namespace cputrain::bench {

RandomClassifyRows::RandomClassifyRows(const model::Shape& shape, int B, int T, uint64_t seed,
                                       int windows)
    : B_(B),
      T_(T),
      windows_(windows),
      pad_(shape.pad_token >= 0 ? shape.pad_token : 0),
      seed_(seed) {
  CPUTRAIN_CHECK(B > 0 && T >= 16 && windows > 0, "RandomClassifyRows: B > 0, T >= 16");
  const std::size_t n = static_cast<std::size_t>(windows) * static_cast<std::size_t>(B);
  const std::size_t Ts = static_cast<std::size_t>(T);
  ids_.assign(n * Ts, pad_);
  lengths_.resize(n);
  labels_.resize(n);
  longest_.assign(static_cast<std::size_t>(windows), 0);
  std::mt19937 rng(static_cast<std::mt19937::result_type>(seed));
  std::uniform_int_distribution<int> id(0, shape.V - 1), len(8, T / 2);
  std::uniform_int_distribution<int> label(0, std::max(shape.labels, 1) - 1);
  for (std::size_t f = 0; f < n; ++f) {
    lengths_[f] = len(rng);
    labels_[f] = label(rng);
    int* ids = ids_.data() + f * Ts;
    for (int t = 0; t < lengths_[f]; ++t) {
      do ids[t] = id(rng);
      while (ids[t] == pad_);  // the padding token only pads (a decoder finds the last real token)
    }
    int& longest = longest_[f / static_cast<std::size_t>(B)];
    longest = std::max(longest, lengths_[f]);
  }
  // Each micro-batch's rows in the order `classify train` puts them (task/task_rows.h).
  order_.resize(n);
  for (std::size_t f = 0; f < n; f += static_cast<std::size_t>(B)) {
    train::BalancedOrder(static_cast<std::size_t>(B), lengths_.data() + f, order_.data() + f);
  }
}

int RandomClassifyRows::Positions(std::size_t j) const { return longest_[Window(j)]; }

void RandomClassifyRows::LoadRows(std::size_t j, int row0, int rows, model::Activations& a) const {
  const std::size_t w = Window(j), T = static_cast<std::size_t>(longest_[w]);
  const std::size_t Ts = static_cast<std::size_t>(T_), w0 = w * static_cast<std::size_t>(B_);
  for (int r = 0; r < rows; ++r) {
    const std::size_t f = w0 + order_[w0 + static_cast<std::size_t>(row0 + r)];
    std::copy_n(ids_.data() + f * Ts, T, a.inputs + static_cast<std::size_t>(r) * T);
    if (a.types) std::fill_n(a.types + static_cast<std::size_t>(r) * T, T, 0);
    a.lengths[r] = lengths_[f];
    a.starts[r] = labels_[f];
  }
}

std::vector<train::ShardRecord> RandomClassifyRows::Identity() const {
  return {{fmt::format("bench:random-classify-rows/seed={}/T={}", seed_, T_), lengths_.size()}};
}

int RandomClassifyRows::LongestRow() const {
  return *std::max_element(longest_.begin(), longest_.end());
}

double RandomClassifyRows::PaddedShare() const {
  double sum = 0;
  for (int l : longest_) sum += l;
  return sum / (static_cast<double>(longest_.size()) * T_);
}

std::string RandomClassifyRows::Describe() const {
  return fmt::format(
      "{} random classification rows of 8..{} tokens (SST-2-like), each micro-batch padded to "
      "its longest row: {:.0f}% of T={} on average; {} micro-batches repeating",
      lengths_.size(), T_ / 2, 100 * PaddedShare(), T_, windows_);
}

}  // namespace cputrain::bench
