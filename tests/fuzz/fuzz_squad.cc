// Fuzz target: SQuAD files (src/task/qa/squad.h: the official JSON, Hugging Face JSON Lines or a
// JSON list), on the input as the file, then the features of what it accepts (squad_features.h).
//
// An accepted file must give examples whose text is UTF-8 (the file was checked whole) and
// whose every answer lies inside its context; their features, made with a word-per-token
// tokenizer at max_seq_length 16 and doc_stride 3 (many windows), must label inside [0, 16) and
// cover each example with at least one window. A rejection is an InputError; anything else is a
// finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "../space_tokenizer.h"
#include "common/error.h"
#include "common/utf8.h"
#include "fuzz_util.h"
#include "task/qa/squad.h"
#include "task/qa/squad_features.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using namespace cputrain;
  fuzz::MemFile file(data, size);
  task::SquadData d;
  try {
    d = task::ReadSquad(file.path());
  } catch (const InputError&) {
    return 0;
  }
  for (const task::Example& ex : d.examples) {
    if (FindUtf8Error(ex.context) || FindUtf8Error(ex.question)) std::abort();
    for (std::size_t k = 0; k < ex.answer_starts.size(); ++k) {
      const task::ByteSpan b = task::AnswerBytes(ex, k);
      if (b.begin > b.end || b.end > ex.context.size()) std::abort();
    }
  }
  const test::SpaceTokenizer tok;
  task::FeatureOptions o;
  o.max_seq_length = 16;
  o.doc_stride = 3;
  task::QaFeatures f;
  try {
    f = task::MakeQaFeatures(d.examples, tok, task::BertSpecialIds(tok), o);
  } catch (const InputError&) {  // a question that leaves no room for its context
    return 0;
  }
  if (f.num_examples() != d.examples.size()) std::abort();
  for (std::size_t e = 0; e < f.num_examples(); ++e) {
    if (f.first_feature(e + 1) <= f.first_feature(e)) std::abort();  // no window
  }
  for (std::size_t i = 0; i < f.size(); ++i) {
    const task::QaFeatures::Row& r = f.row(i);
    if (r.start_position < 0 || r.start_position >= 16 || r.end_position < 0 ||
        r.end_position >= 16 || r.context_begin >= r.length || r.length > 16) {
      std::abort();
    }
  }
  return 0;
}
