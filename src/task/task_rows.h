// A task's split as the rows Train() and Infer() read (train/rows.h): the training rows in a new
// order each epoch, or every row in order for prediction; each micro-batch padded to the run's T,
// or, for a split that allows it, to its longest row (dynamic padding).
//
// Training order. The rows form one stream over the epochs, epoch e being a permutation of them
// (train::EpochPermutation's SplitMix64 Fisher-Yates from (seed, e): the same on every process
// and placement); micro-batch p is the stream's rows [p*B, (p+1)*B), so a batch that runs past an
// epoch's end takes the next epoch's first rows (Hugging Face's sampler ends each epoch with a
// short batch instead). An epoch is ceil(rows / B) micro-batches. Within a micro-batch the rows
// stand in train::BalancedOrder (by their lengths), so the groups that split it get equal work.
//
// Prediction order: micro-batch p is rows [p*B, (p+1)*B); places past the last row repeat it
// (their logits are ignored: RowAt says whose they are).
//
// Dynamic padding (Split::dynamic_padding): micro-batch j's rows are padded to the longest of the
// whole global micro-batch (every group and process: Positions(j) is the same everywhere), as
// the Trainer's DataCollatorWithPadding pads each batch to its longest; attention never reads
// the padding, so the results are those of any longer padding.
//
// Thread safety: as RowSource's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "task/task.h"
#include "train/rows.h"

namespace cputrain::task {

class TaskRows final : public train::RowSource {
 public:
  // split must outlive this. B: the global micro-batch, T: the run's positions (data.seq_len).
  // shuffle: the training order with `seed`, else the prediction order.
  TaskRows(const Split& split, int B, int T, bool shuffle, uint64_t seed);
  std::size_t windows() const override;
  uint64_t EpochOf(uint64_t p) const override;
  void Plan(uint64_t p, int k) override;
  void LoadRows(std::size_t j, int row0, int rows, model::Activations& a) const override;
  int Positions(std::size_t j) const override;
  int LongestRow() const override { return longest_; }
  double LossCount() const override;
  std::vector<train::ShardRecord> Identity() const override;
  std::string Describe() const override;
  const char* unit() const override { return split_.unit(); }
  // The row of place r of planned micro-batch j (prediction: whose logits they are).
  std::size_t RowAt(std::size_t j, int r) const;

 private:
  // The permutation of epoch e (cached: a step touches at most two epochs when B <= rows).
  const std::vector<std::size_t>& Perm(uint64_t e);
  // Training: each planned micro-batch's rows in train::BalancedOrder, so that the groups
  // sharing it get equal real tokens (an unpadded encoder classifier's work).
  void Balance();
  const Split& split_;
  int B_, T_;
  bool shuffle_;
  uint64_t seed_;
  std::vector<std::size_t> planned_;  // k*B row indices
  std::vector<int> positions_;        // k: each planned micro-batch's padded length
  int longest_ = 0;                   // dynamic padding: the longest row (at most T); else 0
  uint64_t cached_epoch_[2] = {UINT64_MAX, UINT64_MAX};
  std::vector<std::size_t> cached_[2];
};

}  // namespace cputrain::task
