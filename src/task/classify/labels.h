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
//     transformers does.
// A trained model's labels come back from its config.json.
//
// Thread safety: Labels is immutable once built.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
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
  // The id of a label value; -1 if it is not a label.
  int Id(const nlohmann::json& value) const;
};

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
