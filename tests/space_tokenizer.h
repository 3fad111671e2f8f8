// A tokenizer for tests of what comes after tokenizing (SQuAD features): words separated by
// spaces, one token each, with their byte offsets; [CLS] 0, [SEP] 1, [PAD] 2, every word 3.
// Fast and simple, so that a test measures the code under test and not a real tokenizer.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"

namespace cputrain::test {

class SpaceTokenizer : public data::Tokenizer {
 public:
  std::string name() const override { return "space"; }
  int vocab_size() const override { return 4; }
  int eot_token() const override { return -1; }
  void Encode(std::string_view text, std::vector<int>* out) const override {
    std::vector<data::Offset> offsets;
    EncodeWithOffsets(text, out, &offsets);
  }
  void EncodeWithOffsets(std::string_view text, std::vector<int>* ids,
                         std::vector<data::Offset>* offsets) const override {
    for (std::size_t i = 0; i < text.size();) {
      std::size_t end = text.find(' ', i);
      if (end == std::string_view::npos) end = text.size();
      if (end > i) {
        ids->push_back(3);
        offsets->push_back({static_cast<uint32_t>(i), static_cast<uint32_t>(end)});
      }
      i = end + 1;
    }
  }
  int TokenId(std::string_view token) const override {
    return token == "[CLS]" ? 0 : token == "[SEP]" ? 1 : token == "[PAD]" ? 2 : -1;
  }
  bool IsSafeCut(std::string_view, std::size_t) const override { return false; }
  std::string Decode(const int*, std::size_t) const override { return ""; }
};

}  // namespace cputrain::test
