#include "task/task_rows.h"

#include <fmt/format.h>

#include <algorithm>

namespace cputrain::task {

TaskRows::TaskRows(const Split& split, int B, int T, bool shuffle, uint64_t seed)
    : split_(split), B_(B), T_(T), shuffle_(shuffle), seed_(seed) {
  for (std::size_t i = 0; split_.dynamic_padding() && i < split_.rows(); ++i)
    longest_ = std::max(longest_, std::min(split_.length(i), T_));
}

std::size_t TaskRows::windows() const { return (split_.rows() + B_ - 1) / B_; }

uint64_t TaskRows::EpochOf(uint64_t p) const {
  if (!shuffle_) return 0;
  return ((p + 1) * static_cast<uint64_t>(B_) - 1) / split_.rows();
}

const std::vector<std::size_t>& TaskRows::Perm(uint64_t e) {
  for (int i = 0; i < 2; ++i)
    if (cached_epoch_[i] == e) return cached_[i];
  const int slot = cached_epoch_[0] < cached_epoch_[1] ? 0 : 1;  // drop the older epoch
  cached_[slot].resize(split_.rows());
  train::EpochPermutation(split_.rows(), seed_, e, cached_[slot].data());
  cached_epoch_[slot] = e;
  return cached_[slot];
}

void TaskRows::Plan(uint64_t p, int k) {
  const std::size_t n = split_.rows();
  planned_.resize(static_cast<std::size_t>(k) * B_);
  for (std::size_t i = 0; i < planned_.size(); ++i) {
    const uint64_t s = p * static_cast<uint64_t>(B_) + i;  // the stream's row
    if (!shuffle_) {
      planned_[i] = static_cast<std::size_t>(std::min<uint64_t>(s, n - 1));
    } else {
      planned_[i] = Perm(s / n)[static_cast<std::size_t>(s % n)];
    }
  }
  if (shuffle_) Balance();
  positions_.assign(static_cast<std::size_t>(k), 0);
  if (!split_.dynamic_padding()) return;
  for (std::size_t i = 0; i < planned_.size(); ++i) {
    int& longest = positions_[i / static_cast<std::size_t>(B_)];
    longest = std::max(longest, std::min(split_.length(planned_[i]), T_));
  }
}

void TaskRows::Balance() {
  const std::size_t B = static_cast<std::size_t>(B_);
  std::vector<std::size_t> rows(B), order(B);
  std::vector<int> lengths(B);
  for (std::size_t j0 = 0; j0 < planned_.size(); j0 += B) {
    std::copy_n(planned_.begin() + static_cast<std::ptrdiff_t>(j0), B, rows.begin());
    for (std::size_t i = 0; i < B; ++i) lengths[i] = std::min(split_.length(rows[i]), T_);
    train::BalancedOrder(B, lengths.data(), order.data());
    for (std::size_t i = 0; i < B; ++i) planned_[j0 + i] = rows[order[i]];
  }
}

std::size_t TaskRows::RowAt(std::size_t j, int r) const {
  return planned_.at(j * static_cast<std::size_t>(B_) + static_cast<std::size_t>(r));
}

int TaskRows::Positions(std::size_t j) const { return positions_.at(j); }

double TaskRows::LossCount() const {
  double n = 0;
  for (std::size_t i : planned_) {
    const int kept = split_.loss_labels(i);
    if (kept < 0) return 0;
    n += kept;
  }
  return n;
}

void TaskRows::LoadRows(std::size_t j, int row0, int rows, model::Activations& a) const {
  const int T = positions_.at(j) > 0 ? positions_[j] : T_;
  for (int r = 0; r < rows; ++r) split_.Load(RowAt(j, row0 + r), r, T, a);
}

std::vector<train::ShardRecord> TaskRows::Identity() const {
  return {train::RecordOf(split_.path(), split_.rows())};
}

std::string TaskRows::Describe() const {
  return fmt::format("{} {} of {} ({} micro-batches an epoch{})", split_.rows(), split_.unit(),
                     split_.path(), windows(),
                     split_.dynamic_padding() ? ", each padded to its longest row" : "");
}

}  // namespace cputrain::task
