// train/batches: which token rows each replica group reads at each step.
//
// A token file of N tokens holds n = (N-1) div (B*T) windows of B*T+1 tokens: window w is tokens
// [w*B*T, w*B*T + B*T + 1), read as B rows of T inputs with the targets shifted by one. Step s
// trains on window s mod n (the reference runs in tests/reference do the same). The B rows are
// split across processes, then across each process's groups, in order: group g of rank r reads
// `rows` rows from row r*(B/R) + g*rows.
//
// Thread safety: immutable after Open; LoadRows may run on any number of groups at once.
#pragma once

#include <cstddef>
#include <string>

#include "data/token_file.h"

namespace cputrain::train {

class TokenWindows {
 public:
  // Opens `path` (config key `key`, for messages) and checks every id is below `vocab` and
  // that it holds at least one window. Throws InputError naming the key and the file.
  static TokenWindows Open(const std::string& path, const char* key, int vocab, int B, int T);

  std::size_t windows() const { return windows_; }
  const std::string& path() const { return file_.path(); }

  // inputs/targets are (rows, T): rows [row0, row0 + rows) of window `w`.
  void LoadRows(std::size_t w, int row0, int rows, int* inputs, int* targets) const;

 private:
  TokenWindows(data::TokenFile file, int B, int T);
  data::TokenFile file_;
  int B_, T_;
  std::size_t windows_;
};

}  // namespace cputrain::train
