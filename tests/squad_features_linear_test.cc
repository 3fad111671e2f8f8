// Issue 32, item 2: `qa features` / `qa train` were quadratic in the context's length. Labelling
// each window converted the answer's answer_start (characters) to bytes by walking the context
// from its start, once per window: an answer near the end of a context of n bytes cost about
// n^2 / (window stride) steps — 1 MB took 2.8 s, 2 MB 11 s, 50 MB an estimated two hours.
//
// Not a timed test: ctest runs it under TIMEOUT 60 (tests/CMakeLists.txt). The context here is
// 32 MiB in 8,322 windows; the quadratic labelling walked 31M characters per window, 2.6e11 steps
// (minutes at the least, far past the timeout), where the linear one takes a fraction of a
// second. The labels are checked too, against where the answer is by construction.
#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "space_tokenizer.h"
#include "task/qa/squad.h"
#include "task/qa/squad_features.h"

namespace cputrain::task {
namespace {

TEST(SquadFeatures, AnswerAtTheEndOfA32MiBContextIsLabelledInLinearTime) {
  // Words of 14 characters and 15 bytes ("é" is two), so answer_start (characters) and the byte
  // offsets differ, as they do in real text.
  const std::string word =
      "abcd\xC3\xA9"
      "fghijklmn";
  ASSERT_EQ(word.size(), 15u);
  constexpr std::size_t kWords = std::size_t{2} << 20;  // 2M words, 32 MiB with the spaces
  Example ex;
  ex.id = "end";
  ex.question = "where";
  ex.context.reserve(kWords * 16);
  for (std::size_t i = 0; i < kWords; ++i) {
    if (i) ex.context += ' ';
    ex.context += word;
  }
  // The last word but one, in characters (a word and its space are 15). Not the last: run_qa.py
  // labels an answer in a window's last token T - 1 (squad_features.cc, Label).
  ex.answer_texts = {word};
  ex.answer_starts = {static_cast<int>((kWords - 2) * 15)};
  const test::SpaceTokenizer tok;  // fast: the test measures the labelling
  FeatureOptions o;
  o.max_seq_length = 384;
  o.doc_stride = 128;
  o.keep_offsets = false;
  const QaFeatures f = MakeQaFeatures({ex}, tok, BertSpecialIds(tok), o);

  // [CLS] q [SEP] window [SEP]: L = 384 - 3 - 1 = 380 context tokens, windows every 252.
  const std::size_t L = 380, step = L - 128;
  const std::size_t windows = 1 + (kWords - L + step - 1) / step;
  ASSERT_EQ(f.size(), windows);
  std::size_t labelled = 0;
  for (std::size_t i = 0; i < f.size(); ++i) {
    const QaFeatures::Row& r = f.row(i);
    ASSERT_EQ(r.context_begin, 3);
    const std::size_t first = i * step;  // the window's first context token
    if (first + L < kWords) {  // not the last window: the answer (token kWords - 2) is outside it
      ASSERT_EQ(r.start_position, 0) << i;
      ASSERT_EQ(r.end_position, 0) << i;
      continue;
    }
    const int at = static_cast<int>(3 + (kWords - 2 - first));
    EXPECT_EQ(r.start_position, at);
    EXPECT_EQ(r.end_position, at);
    ++labelled;
  }
  EXPECT_EQ(labelled, 1u);
}

}  // namespace
}  // namespace cputrain::task
