#include "task/squad_rows.h"

#include <fmt/format.h>

#include <algorithm>

#include "train/rows.h"

namespace cputrain::task {

QaRows::QaRows(const QaFeatures& features, int B, bool shuffle, uint64_t seed, std::string source)
    : f_(features), B_(B), shuffle_(shuffle), seed_(seed), source_(std::move(source)) {}

std::size_t QaRows::windows() const { return (f_.size() + B_ - 1) / B_; }

uint64_t QaRows::EpochOf(uint64_t p) const {
  if (!shuffle_) return 0;
  return ((p + 1) * static_cast<uint64_t>(B_) - 1) / f_.size();
}

const std::vector<std::size_t>& QaRows::Perm(uint64_t e) {
  for (int i = 0; i < 2; ++i)
    if (cached_epoch_[i] == e) return cached_[i];
  const int slot = cached_epoch_[0] < cached_epoch_[1] ? 0 : 1;  // drop the older epoch
  cached_[slot].resize(f_.size());
  train::EpochPermutation(f_.size(), seed_, e, cached_[slot].data());
  cached_epoch_[slot] = e;
  return cached_[slot];
}

void QaRows::Plan(uint64_t p, int k) {
  const std::size_t n = f_.size();
  planned_.resize(static_cast<std::size_t>(k) * B_);
  for (std::size_t i = 0; i < planned_.size(); ++i) {
    const uint64_t s = p * static_cast<uint64_t>(B_) + i;  // the stream's row
    if (!shuffle_) {
      planned_[i] = static_cast<std::size_t>(std::min<uint64_t>(s, n - 1));
    } else {
      planned_[i] = Perm(s / n)[static_cast<std::size_t>(s % n)];
    }
  }
}

std::size_t QaRows::FeatureAt(std::size_t j, int r) const {
  return planned_.at(j * static_cast<std::size_t>(B_) + static_cast<std::size_t>(r));
}

void QaRows::LoadRows(std::size_t j, int row0, int rows, model::Activations& a) const {
  const int T = f_.max_seq_length();
  for (int r = 0; r < rows; ++r) {
    const std::size_t i = FeatureAt(j, row0 + r);
    const auto ids = f_.input_ids(i);
    std::copy(ids.begin(), ids.end(), a.inputs + static_cast<std::size_t>(r) * T);
    f_.TokenTypeIds(i, a.types + static_cast<std::size_t>(r) * T);
    const QaFeatures::Row& row = f_.row(i);
    a.lengths[r] = row.length;
    a.starts[r] = row.start_position;
    a.ends[r] = row.end_position;
  }
}

std::vector<train::ShardRecord> QaRows::Identity() const {
  return {train::RecordOf(source_, f_.size())};
}

std::string QaRows::Describe() const {
  return fmt::format("{} features of {} ({} micro-batches an epoch)", f_.size(), source_,
                     windows());
}

}  // namespace cputrain::task
