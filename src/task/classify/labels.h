// The labels of a classification run, as run_glue.py and run_classification.py build them
// (docs/classification.md, "Labels"):
//   - the problem: regression when the label column holds numbers that are not all integers
//     (datasets types it float: run_glue.py's is_regression) or STS-B, multi-label when it holds
//     lists (run_classification.py), else single-label; --problem_type / --do_regression decide
//     instead when given;
//   - the label list: the sorted distinct values (integers in order, strings by code point), the
//     validation and test files' own added as run_classification.py adds them, -1 dropped (GLUE's
//     unlabelled test rows); a GLUE task's ClassLabel names when --task_name is given (its rows
//     may hold the names or their indices);
//   - label2id: each value's index in the list, written into config.json (id2label, label2id) as
//     transformers does; two labels config.json would name alike (1 and "1") are refused;
//   - a multi-label file must list at least one label; a regression's labels must be finite and
//     within float32's range (the model's targets are float32).
// A trained model's labels come back from its config.json; transformers' default names
// (LABEL_0, LABEL_1, ...) name no label of the data, so a row may hold the name or the id.
// Looking a label up is a hash lookup: files with many distinct labels are read in linear time.
//
// Thread safety: Labels is immutable once built.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/shape.h"
#include "task/classify/glue.h"
#include "task/classify/table.h"

namespace cputrain::task {

struct Labels {
  model::ProblemType problem = model::ProblemType::kSingleLabel;
  std::vector<nlohmann::json> names;  // id -> the label (a string or an integer); regression: none
  // The model's outputs: the labels, or 1 for a regression.
  int outputs() const;
  // The label of id as config.json and predict_results.txt write it (Python's str()).
  std::string Name(int id) const;
  // The id of a label value; -1 if it is not a label. A value read as an integer from one file
  // finds the label config.json wrote as its digits; with default names, an integer in
  // [0, outputs()) is its id.
  int Id(const nlohmann::json& value) const;
  // Makes the lookup Id uses from names (once they are final).
  void Index();

  bool default_names = false;                // config.json's id2label is transformers' LABEL_i
  std::unordered_map<std::string, int> ids;  // LabelKey(names[i]) -> i
};

// The key of a label value in Labels::ids: its type and value (1 and "1" differ).
std::string LabelKey(const nlohmann::json& value);

// One split's label column: its table and column index.
struct LabelColumn {
  const Table* table;
  std::size_t column;
};

// The labels of the training data (`train`), the other splits' labels added.
Labels LabelsFromData(const LabelColumn& train, const std::vector<LabelColumn>& others,
                      const GlueTask* glue, std::optional<model::ProblemType> forced);

// A trained classifier's labels: config.json's id2label and problem_type (an empty object for a
// checkpoint of ours without one: LABEL_i, shape's problem), `outputs` outputs.
Labels LabelsFromModel(const nlohmann::json& config, int outputs, model::ProblemType problem);

// Row r of `col` as targets: *id (single-label) or values[0, outputs) (regression: the number;
// multi-label: 0/1). InputError naming the file, its line and the fix for a missing or unknown
// label.
void RowTargets(const Labels& labels, const LabelColumn& col, std::size_t r, int* id,
                float* values);

// config.json's keys for the labels: id2label, label2id, problem_type.
void WriteLabels(const Labels& labels, nlohmann::json* config);

}  // namespace cputrain::task
