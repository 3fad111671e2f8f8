// The BPE merge loop both BPE tokenizers share (internal to src/data): symbols in a doubly
// linked list, a heap of candidate merges ordered by (rank, position), so the lowest-ranked
// pair merges first and, among equal ranks, the leftmost; O(n log n) in the symbols. This is
// the order of Hugging Face's BPE (Word::merge_all) for any merge list, and of the scan in
// gpt2_tokenizer.h for lists whose merges only use parts made by lower ranks.
#pragma once

#include <functional>
#include <queue>
#include <vector>

namespace cputrain::data {

struct BpeMerge {
  int rank;    // < 0: the pair does not merge
  int merged;  // the id the pair merges into
};

// Merges the symbols ids[0, n) (changed in place) and appends the result to *out. `find(left,
// right)` returns the pair's BpeMerge.
template <typename Find>
void BpeMergeHeap(int* id, std::size_t n, const Find& find, std::vector<int>* out) {
  // Entries go stale when a symbol they name is merged away or changed; they are checked
  // against the current symbols when popped.
  std::vector<int> prev(n), next(n);
  for (std::size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<int>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int>(i + 1) : -1;
  }
  struct Candidate {
    int rank, pos, left, right, merged;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](int pos) {
    if (pos < 0 || next[pos] < 0) return;
    const BpeMerge m = find(id[pos], id[next[pos]]);
    if (m.rank >= 0) heap.push({m.rank, pos, id[pos], id[next[pos]], m.merged});
  };
  for (std::size_t i = 0; i + 1 < n; ++i) push(static_cast<int>(i));
  while (!heap.empty()) {
    Candidate c = heap.top();
    heap.pop();
    int r = next[c.pos];
    if (id[c.pos] != c.left || r < 0 || id[r] != c.right) continue;  // stale
    id[c.pos] = c.merged;
    id[r] = -1;  // removed; never a live symbol again
    next[c.pos] = next[r];
    if (next[r] >= 0) prev[next[r]] = c.pos;
    push(prev[c.pos]);
    push(c.pos);
  }
  if (n > 0) {
    for (int i = 0; i >= 0; i = next[i]) out->push_back(id[i]);
  }
}

}  // namespace cputrain::data
