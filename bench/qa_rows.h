// bench/qa_rows: random question-answering features for `bench train` on a span-head preset
// (bert-base-qa, distilbert-qa), as the rows Train() reads (train/rows.h) — the shape of what
// `qa train` feeds it (task/task_rows.h), without a SQuAD file or a tokenizer.
//
// Each feature, like run_qa.py's prepare_train_features with pad_to_max_length: `length` real
// tokens drawn uniformly from [0.6 T, T] (SQuAD's windows are partly padded), random ids in
// [0, V) on them and the padding token (Shape::pad_token, else 0) after; token types 0 on the
// first third ([CLS] question [SEP]) and on the padding, 1 on the rest (the context window);
// an answer span inside the context, at most 30 tokens long (run_qa.py's max_answer_length).
// Speed depends on the lengths, not on the ids: the timed work is what `qa train` does on
// features of those lengths.
//
// `windows` micro-batches of B features are drawn once from `seed` (std::mt19937) and repeat
// in order: micro-batch p is number p mod windows.
//
// Thread safety: as RowSource's (LoadRows only reads).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/shape.h"
#include "train/rows.h"

namespace cputrain::bench {

class RandomQaRows final : public train::RowSource {
 public:
  RandomQaRows(const model::Shape& shape, int B, int T, uint64_t seed, int windows = 4);
  std::size_t windows() const override { return static_cast<std::size_t>(windows_); }
  uint64_t EpochOf(uint64_t p) const override { return p / static_cast<uint64_t>(windows_); }
  void Plan(uint64_t p, int /*k*/) override { planned_ = p; }
  void LoadRows(std::size_t j, int row0, int rows, model::Activations& a) const override;
  std::vector<train::ShardRecord> Identity() const override;
  std::string Describe() const override;
  // The real tokens of feature f (of windows * B), for tests and the summary.
  int length(std::size_t f) const { return lengths_[f]; }
  // The mean share of real (unpadded) tokens over all features.
  double RealShare() const;

 private:
  int B_, T_, windows_;
  uint64_t seed_;
  uint64_t planned_ = 0;
  std::vector<int> ids_, types_;              // (windows*B, T)
  std::vector<int> lengths_, starts_, ends_;  // (windows*B)
};

}  // namespace cputrain::bench
