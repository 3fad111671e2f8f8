// Question answering's features as the rows Train() reads (train/rows.h): the training features
// in a new order each epoch, or the validation features in order for prediction.
//
// Training order. The features form one stream over the epochs, epoch e being a permutation of
// them (train::EpochPermutation's SplitMix64 Fisher-Yates from (seed, e): the same on every
// process and placement); micro-batch p is the stream's rows [p*B, (p+1)*B), so a batch that
// runs past an epoch's end takes the next epoch's first features (Hugging Face's sampler ends
// each epoch with a short batch instead). An epoch is ceil(features / B) micro-batches.
//
// Prediction order: micro-batch p is features [p*B, (p+1)*B); rows past the last feature repeat
// it (their logits are ignored).
//
// Thread safety: as RowSource's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "task/squad_features.h"
#include "train/rows.h"

namespace cputrain::task {

class QaRows final : public train::RowSource {
 public:
  // features must outlive this. B: the global micro-batch. shuffle: the training order with
  // `seed`, else the prediction order. source: the file the features came from (the identity a
  // checkpoint records).
  QaRows(const QaFeatures& features, int B, bool shuffle, uint64_t seed, std::string source);
  std::size_t windows() const override;
  uint64_t EpochOf(uint64_t p) const override;
  void Plan(uint64_t p, int k) override;
  void LoadRows(std::size_t j, int row0, int rows, model::Activations& a) const override;
  std::vector<train::ShardRecord> Identity() const override;
  std::string Describe() const override;
  // The feature of row r of planned micro-batch j (prediction: which logits are whose).
  std::size_t FeatureAt(std::size_t j, int r) const;

 private:
  // The permutation of epoch e (cached: a step touches at most two epochs when B <= features).
  const std::vector<std::size_t>& Perm(uint64_t e);
  const QaFeatures& f_;
  int B_;
  bool shuffle_;
  uint64_t seed_;
  std::string source_;
  std::vector<std::size_t> planned_;  // k*B feature indices
  uint64_t cached_epoch_[2] = {UINT64_MAX, UINT64_MAX};
  std::vector<std::size_t> cached_[2];
};

}  // namespace cputrain::task
