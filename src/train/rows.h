// train/rows: what a run trains on, as Train() reads it — a stream of micro-batches of B rows
// each (B the global micro-batch), an epoch being windows() of them. The language-model source
// (LmRows: token files, batches.h) is Train()'s own; a task supplies another (a task's features:
// task/task_rows.h) through TrainOptions::train_rows.
//
// Thread safety: Plan runs on the main thread between steps; LoadRows runs on every group's
// driver at once during a step and must only read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/transformer.h"

namespace cputrain::train {

// One file of the data a run trained on, as its checkpoints record it.
struct ShardRecord {
  std::string path;  // absolute
  uint64_t tokens = 0;
  bool operator==(const ShardRecord&) const = default;
};
// The record of `path` holding `size` units: its absolute path, symlinks resolved where they
// exist (a run resumed from another directory names the same file the same way).
ShardRecord RecordOf(const std::string& path, uint64_t size);

// A permutation of [0, n) into out, a pure function of (n, seed, e): SplitMix64 Fisher-Yates
// (batches.h, WindowOrder: a new order of the data each epoch e, the same on every process).
void EpochPermutation(std::size_t n, uint64_t seed, uint64_t e, std::size_t* out);

// The places of one micro-batch's n rows (lengths[i]: row i's real tokens) that balance the
// groups splitting it: order[place] = the row at that place. The rows sorted longest first (ties
// keep their order); n = 2^a * m, m odd; rank r goes to share s (of 2^a, m rows each) at place
// s * m + r / 2^a, where bit a-1-j of s (the half, then the quarter in it, ...) is the parity of
// the ones in r >> j: Thue-Morse's split, in which ranks 4i..4i+3 go A B B A to the halves, and
// the same again within each half. Each of 2^k equal contiguous shares (the replica groups of
// every process, rank-major: trainer.cc's MicroRows) then gets the same count of rows, token
// counts apart by second differences of the sorted lengths (nothing for evenly spread lengths),
// at most by the longest row minus the shortest. The order depends on the rows alone, not on how
// many groups split them: every placement puts each row at the same global place (its dropout
// masks are the same), and an unpadded encoder classifier, whose work is its real tokens, gives
// each group the same work.
void BalancedOrder(std::size_t n, const int* lengths, std::size_t* order);

class RowSource {
 public:
  virtual ~RowSource() = default;
  // Micro-batches per epoch (> 0).
  virtual std::size_t windows() const = 0;
  // The epoch data position p (micro-batches read so far) falls in.
  virtual uint64_t EpochOf(uint64_t p) const = 0;
  // Before a step: its k micro-batches are those at positions [p, p + k).
  virtual void Plan(uint64_t p, int k) = 0;
  // Rows [row0, row0 + rows) of the global micro-batch j of the planned step (or, for
  // evaluation sources, of micro-batch j itself) into a's token views: inputs and targets, or a
  // task model's inputs, types, lengths and labels; each row Positions(j) (or T) long.
  virtual void LoadRows(std::size_t j, int row0, int rows, model::Activations& a) const = 0;
  // The positions micro-batch j (as LoadRows numbers it) is padded to, when the source pads each
  // micro-batch to its longest row (Hugging Face's DataCollatorWithPadding: dynamic padding, at
  // most T); 0: every micro-batch has the run's T (data.seq_len). The same on every process and
  // group: the whole global micro-batch's longest row.
  virtual int Positions(std::size_t j) const {
    (void)j;
    return 0;
  }
  // The most positions any micro-batch of the source can be padded to, when it pads each to its
  // longest row (its longest row, at most T): what the activations are made for, so that a
  // classifier on sentences of 8..64 tokens does not hold buffers for T = 128. 0: T.
  virtual int LongestRow() const { return 0; }
  // What the planned step's loss is the mean over, when the source says (0: every position of
  // every row, B*T per micro-batch): the kept labels of the whole global step (all its
  // micro-batches, every group and process alike), as transformers' Trainer divides the summed
  // token losses by num_items_in_batch (sft: the labels that are not -100).
  virtual double LossCount() const { return 0; }
  // What Identity()'s sizes count, for messages: "tokens" (token files), "features", "examples".
  virtual const char* unit() const { return "tokens"; }
  // What a checkpoint records of the data, so that a resume on other data is refused: each
  // file's absolute path and size (in tokens, or in the source's unit).
  virtual std::vector<ShardRecord> Identity() const = 0;
  // For the start line: "1234 train windows in 2 shard(s)".
  virtual std::string Describe() const = 0;
};

}  // namespace cputrain::train
