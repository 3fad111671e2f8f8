// Single texts and pairs to ids (features.h).
#include "task/classify/features.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/error.h"
#include "data/wordpiece.h"

namespace cputrain::task {
namespace {

// truncation="longest_first" of the tokenizers library (utils/truncation.rs): a and b cut to
// `budget` tokens together.
void LongestFirst(std::size_t budget, std::vector<int>& a, std::vector<int>* b) {
  if (b == nullptr) {
    if (a.size() > budget) a.resize(budget);
    return;
  }
  std::size_t n1 = a.size(), n2 = b->size();
  if (n1 + n2 <= budget) return;
  const bool swap = n1 > n2;
  if (swap) std::swap(n1, n2);
  n2 = n1 > budget ? n1 : std::max(n1, budget - n1);
  if (n1 + n2 > budget) {
    n1 = budget / 2;
    n2 = n1 + budget % 2;
  }
  if (swap) std::swap(n1, n2);
  a.resize(std::min(a.size(), n1));
  b->resize(std::min(b->size(), n2));
}

}  // namespace

PairEncoder::PairEncoder(const data::Tokenizer& tokenizer, int max_length)
    : tok_(tokenizer),
      max_length_(max_length),
      wordpiece_(dynamic_cast<const data::WordPieceTokenizer*>(&tokenizer) != nullptr),
      frame_(tokenizer.special_frame()) {
  if (wordpiece_) {
    const int cls = tok_.TokenId("[CLS]"), sep = tok_.TokenId("[SEP]");
    pad_ = tok_.TokenId("[PAD]");
    if (cls < 0 || sep < 0 || pad_ < 0) {
      throw InputError(fmt::format("tokenizer '{}' lacks [CLS], [SEP] or [PAD]", tok_.name()),
                       "pass BERT's vocab.txt or tokenizer.json with --tokenizer_name");
    }
    frame_ = {{cls}, {sep}};
  }
  // One text's specials here; a pair's (more) are checked by Encode, which knows it has one.
  CheckRoom(false);
}

// The specials around one text, or a pair: before a after (before' b after), before' = before
// for a tokenizer.json's pair template, nothing for BERT's ([CLS] a [SEP] b [SEP]).
std::size_t PairEncoder::Specials(bool pair) const {
  const std::size_t one = frame_.before.size() + frame_.after.size();
  return pair ? one + (wordpiece_ ? 0 : frame_.before.size()) + frame_.after.size() : one;
}

// Issue 43: --max_seq_length 4 was refused for single texts as leaving no room beside "4 special
// tokens" (a pair's count, doubled for BERT's 3), where BERT puts 2 around one text.
void PairEncoder::CheckRoom(bool pair) const {
  const std::size_t specials = Specials(pair);
  if (static_cast<std::size_t>(max_length_) > specials) return;
  throw InputError(fmt::format("--max_seq_length {} leaves no room for {} beside the tokenizer's "
                               "{} special tokens around {}",
                               max_length_, pair ? "the texts of a pair" : "the text", specials,
                               pair ? "a pair" : "one text"),
                   fmt::format("raise --max_seq_length above {}", specials));
}

int PairEncoder::Encode(std::string_view a, const std::string_view* b,
                        std::vector<std::int32_t>* ids) const {
  std::vector<int> ta, tb;
  tok_.Encode(a, &ta);
  if (b) tok_.Encode(*b, &tb);
  if (b) CheckRoom(true);
  LongestFirst(static_cast<std::size_t>(max_length_) - Specials(b != nullptr), ta,
               b ? &tb : nullptr);
  ids->clear();
  ids->insert(ids->end(), frame_.before.begin(), frame_.before.end());
  ids->insert(ids->end(), ta.begin(), ta.end());
  ids->insert(ids->end(), frame_.after.begin(), frame_.after.end());
  const int second = static_cast<int>(ids->size());
  if (!b) return second;
  if (!wordpiece_) ids->insert(ids->end(), frame_.before.begin(), frame_.before.end());
  ids->insert(ids->end(), tb.begin(), tb.end());
  ids->insert(ids->end(), frame_.after.begin(), frame_.after.end());
  return second;
}

}  // namespace cputrain::task
