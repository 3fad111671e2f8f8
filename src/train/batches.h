// train/batches: which token rows each replica group reads at each step.
//
// data.train (and data.val) name one or more llm.c token files: paths, globs, or a list of both.
// They expand to a sorted list of distinct paths (the shards), each memory-mapped and checked
// before training (header, size, every id below the vocabulary).
//
// Windows. A shard of N_i tokens holds n_i = (N_i-1) div (B*T) windows of B*T+1 tokens: window
// w of the shard is tokens [w*B*T, w*B*T + B*T + 1), read as B rows of T inputs with the
// targets shifted by one. Windows never cross a shard boundary (as llm.c's loader, which reads a
// shard until the next B*T+1 tokens no longer fit and moves to the next shard): the tail of each
// shard that does not fill a window is never read. The windows of all shards, in shard order,
// form one index [0, n).
//
// Order. WindowOrder maps the run's data position p (windows read so far: step s with k
// micro-batches reads positions s*k .. s*k+k-1) to a window: epoch e = p div n, and within it
// window perm_e[p mod n]. Without shuffle perm_e is the identity (window p mod n, what the
// reference runs in tests/reference use); with shuffle it is a Fisher-Yates permutation drawn
// from SplitMix64 seeded by (data seed, e): every window exactly once per epoch, a new order
// each epoch, and the same on every process and for any placement (each computes the whole
// permutation; only the rows it reads differ).
//
// Rows. The B rows of a window are split across processes, then across each process's groups,
// in order: group g of rank r reads `rows` rows from row r*(B/R) + g*rows.
//
// Thread safety: TokenWindows is immutable after Open; LoadRows may run on any number of groups
// at once. WindowOrder is used from one thread (At may recompute its permutation): the trainer
// looks up a step's windows on the main thread before the groups run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "data/token_file.h"
#include "train/rows.h"

namespace cputrain::train {

// The sorted, distinct paths that `specs` (paths or glob patterns) name. Throws InputError
// naming `key` for an empty list or a pattern that matches nothing.
std::vector<std::string> ExpandShards(const std::vector<std::string>& specs, const char* key);

class TokenWindows {
 public:
  // Expands and opens `specs` (config key `key`, for messages) and checks every id of every
  // shard is below `vocab` and that they hold at least one window. Throws InputError naming the
  // key and the file.
  static TokenWindows Open(const std::vector<std::string>& specs, const char* key, int vocab, int B,
                           int T);

  std::size_t windows() const { return starts_.back(); }
  std::size_t shard_count() const { return files_.size(); }
  const data::TokenFile& shard(std::size_t i) const { return files_[i]; }
  // Total tokens of all shards.
  std::size_t tokens() const;

  // inputs/targets are (rows, T): rows [row0, row0 + rows) of window `w` in [0, windows()).
  void LoadRows(std::size_t w, int row0, int rows, int* inputs, int* targets) const;

 private:
  TokenWindows(std::vector<data::TokenFile> files, int B, int T);
  std::vector<data::TokenFile> files_;
  std::vector<std::size_t> starts_;  // first global window of each shard, then the total
  int B_, T_;
};

class WindowOrder {
 public:
  // n windows (> 0); shuffle with `seed`, or in order.
  WindowOrder(std::size_t n, bool shuffle, uint64_t seed);

  // The window read at data position p. Recomputes the permutation when p's epoch differs from
  // the last call's (no allocation: the buffer is sized once).
  std::size_t At(uint64_t p);
  uint64_t EpochOf(uint64_t p) const { return p / n_; }

  // The permutation of epoch e into out (n entries): a pure function of (n, seed, e).
  static void Permutation(std::size_t n, uint64_t seed, uint64_t e, std::size_t* out);

 private:
  std::size_t n_;
  bool shuffle_;
  uint64_t seed_;
  uint64_t epoch_ = UINT64_MAX;  // the epoch perm_ holds
  std::vector<std::size_t> perm_;
};

// Token files read as windows of B rows of T (batches.h), in WindowOrder's order.
class LmRows final : public RowSource {
 public:
  LmRows(TokenWindows windows, bool shuffle, uint64_t seed);
  std::size_t windows() const override { return windows_.windows(); }
  uint64_t EpochOf(uint64_t p) const override { return order_.EpochOf(p); }
  void Plan(uint64_t p, int k) override;
  void LoadRows(std::size_t j, int row0, int rows, model::Activations& a) const override;
  std::vector<ShardRecord> Identity() const override;
  std::string Describe() const override;
  const TokenWindows& token_windows() const { return windows_; }

 private:
  TokenWindows windows_;
  WindowOrder order_;
  std::vector<std::size_t> planned_;  // the step's windows
};

}  // namespace cputrain::train
