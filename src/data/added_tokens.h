// Finding a Hugging Face tokenizer's added tokens ("[CLS]", "<|eot_id|>") in text, as the
// library's AddedVocabulary does: leftmost-longest (hf_tokenizer.cc, wordpiece.cc). Internal to
// src/data.
//
// Thread safety: immutable after Build; Match may be called from any thread.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace cputrain::data {

class AddedTokenIndex {
 public:
  // Indexes the non-empty strings contents[i] (by their first byte, longest first, so the first
  // that matches at a position is the longest).
  void Build(const std::vector<std::string_view>& contents) {
    contents_ = contents;
    for (auto& list : by_byte_) list.clear();
    for (std::size_t i = 0; i < contents.size(); ++i) {
      by_byte_[static_cast<unsigned char>(contents[i][0])].push_back(static_cast<int>(i));
    }
    for (auto& list : by_byte_) {
      std::stable_sort(list.begin(), list.end(),
                       [&](int a, int b) { return contents_[a].size() > contents_[b].size(); });
    }
  }
  // The index of the longest token written at text[pos], or -1.
  int Match(std::string_view text, std::size_t pos) const {
    for (int c : by_byte_[static_cast<unsigned char>(text[pos])]) {
      if (text.compare(pos, contents_[c].size(), contents_[c]) == 0) return c;
    }
    return -1;
  }

 private:
  std::vector<std::string_view> contents_;  // views of the owner's strings
  std::vector<int> by_byte_[256];
};

}  // namespace cputrain::data
