#include "task/task.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/error.h"
#include "data/tokenizer.h"
#include "task/classify/classify.h"
#include "task/qa/qa.h"
#include "task/sft/sft.h"

namespace cputrain::task {

const char* FileFlag(SplitKind kind) {
  switch (kind) {
    case SplitKind::kTrain:
      return "--train_file";
    case SplitKind::kValidation:
      return "--validation_file";
    case SplitKind::kTest:
      return "--test_file";
  }
  return "";
}

const std::string& Args::File(SplitKind kind) const {
  return kind == SplitKind::kTrain        ? train_file
         : kind == SplitKind::kValidation ? validation_file
                                          : test_file;
}

int Args::Limit(SplitKind kind) const {
  return kind == SplitKind::kTrain        ? max_train_samples
         : kind == SplitKind::kValidation ? max_eval_samples
                                          : max_predict_samples;
}

const std::int32_t* OutsideVocabulary(const std::int32_t* begin, const std::int32_t* end, int V) {
  return std::find_if(begin, end, [V](std::int32_t id) { return id < 0 || id >= V; });
}

void RefuseTokenId(int id, int V, const data::Tokenizer& tokenizer, const std::string& where) {
  throw InputError(
      fmt::format("{}: token id {} is outside the model's vocabulary: tokenizer '{}' has {} "
                  "tokens, --model_name_or_path's vocab_size is {}",
                  where, id, tokenizer.name(), tokenizer.vocab_size(), V),
      fmt::format("use the model's own tokenizer (--tokenizer_name), or a model whose vocab_size "
                  "holds the tokenizer's {} tokens",
                  tokenizer.vocab_size()));
}

// The registry: one line per task.
const std::vector<TaskEntry>& Tasks() {
  static const std::vector<TaskEntry> tasks = {
      {"qa", MakeQaTask},
      {"classify", MakeClassifyTask},
      {"sft", MakeSftTask},
  };
  return tasks;
}

}  // namespace cputrain::task
