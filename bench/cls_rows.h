// bench/cls_rows: random sequence-classification rows for `bench train` on a classifier preset
// (bert-base-cls, smollm2-135m-cls), as the rows Train() reads (train/rows.h) — the shape of
// what `classify train` feeds it (task/task_rows.h), without a data file or a tokenizer.
//
// Each row, like a GLUE sentence (SST-2's are 2 to 66 WordPiece tokens, 13 words on average):
// `length` real tokens drawn uniformly from [8, T/2], random ids in [0, V) on them and the
// padding token (Shape::pad_token, else 0) after; token types 0 (one sentence); a random label.
// The rows of a micro-batch stand in train::BalancedOrder, as TaskRows puts them. Each
// micro-batch is padded to its longest row (Positions: dynamic padding, as run_glue.py's
// DataCollatorWithPadding pads a batch), so the work is what `classify train` does on sentences
// of those lengths; the PyTorch side gets the same lengths (--cls-lengths) and pads the same way.
//
// `windows` micro-batches of B rows are drawn once from `seed` (std::mt19937) and repeat in
// order: micro-batch p is number p mod windows.
//
// Thread safety: as RowSource's (LoadRows only reads).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/shape.h"
#include "train/rows.h"

namespace cputrain::bench {

class RandomClassifyRows final : public train::RowSource {
 public:
  RandomClassifyRows(const model::Shape& shape, int B, int T, uint64_t seed, int windows = 4);
  std::size_t windows() const override { return static_cast<std::size_t>(windows_); }
  uint64_t EpochOf(uint64_t p) const override { return p / static_cast<uint64_t>(windows_); }
  void Plan(uint64_t p, int /*k*/) override { planned_ = p; }
  void LoadRows(std::size_t j, int row0, int rows, model::Activations& a) const override;
  int Positions(std::size_t j) const override;
  int LongestRow() const override;
  std::vector<train::ShardRecord> Identity() const override;
  std::string Describe() const override;
  // The rows (windows * B) and the real tokens of row f.
  std::size_t rows() const { return lengths_.size(); }
  int length(std::size_t f) const { return lengths_[f]; }
  // The mean share of T a micro-batch is padded to.
  double PaddedShare() const;

 private:
  std::size_t Window(std::size_t j) const {
    return static_cast<std::size_t>((planned_ + j) % static_cast<uint64_t>(windows_));
  }
  int B_, T_, windows_, pad_;
  uint64_t seed_;
  uint64_t planned_ = 0;
  std::vector<int> ids_;               // (windows*B, T)
  std::vector<int> lengths_, labels_;  // (windows*B)
  std::vector<int> longest_;           // (windows): each micro-batch's padded length
  std::vector<std::size_t> order_;     // (windows*B): each micro-batch's train::BalancedOrder
};

}  // namespace cputrain::bench
