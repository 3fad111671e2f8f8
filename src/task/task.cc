#include "task/task.h"

#include "task/classify/classify.h"
#include "task/qa/qa.h"

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

// The registry: one line per task.
const std::vector<TaskEntry>& Tasks() {
  static const std::vector<TaskEntry> tasks = {
      {"qa", MakeQaTask},
      {"classify", MakeClassifyTask},
  };
  return tasks;
}

}  // namespace cputrain::task
