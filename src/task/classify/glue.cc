#include "task/classify/glue.h"

namespace cputrain::task {
namespace {

const std::vector<GlueTask>& GlueTasks() {
  static const std::vector<GlueTask> tasks = {
      {"cola", "sentence", nullptr, {"unacceptable", "acceptable"}, {"matthews_correlation"}},
      {"sst2", "sentence", nullptr, {"negative", "positive"}, {"accuracy"}},
      {"mrpc", "sentence1", "sentence2", {"not_equivalent", "equivalent"}, {"accuracy", "f1"}},
      {"qqp", "question1", "question2", {"not_duplicate", "duplicate"}, {"accuracy", "f1"}},
      {"stsb", "sentence1", "sentence2", {}, {"pearson", "spearmanr"}},
      {"mnli", "premise", "hypothesis", {"entailment", "neutral", "contradiction"}, {"accuracy"}},
      {"qnli", "question", "sentence", {"entailment", "not_entailment"}, {"accuracy"}},
      {"rte", "sentence1", "sentence2", {"entailment", "not_entailment"}, {"accuracy"}},
      {"wnli", "sentence1", "sentence2", {"not_entailment", "entailment"}, {"accuracy"}},
  };
  return tasks;
}

}  // namespace

const GlueTask* FindGlueTask(const std::string& name) {
  for (const GlueTask& t : GlueTasks())
    if (name == t.name) return &t;
  return nullptr;
}

std::string GlueTaskNames() {
  std::string out;
  for (const GlueTask& t : GlueTasks()) out += (out.empty() ? "" : ", ") + std::string(t.name);
  return out;
}

}  // namespace cputrain::task
