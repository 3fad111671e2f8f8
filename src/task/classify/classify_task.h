// task/classify internal: the classification task's types (classify_task.cc reads the flags,
// the model and the files; classify_finish.cc chooses the head and scores predictions).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "task/classify/features.h"
#include "task/classify/glue.h"
#include "task/classify/labels.h"
#include "task/classify/table.h"
#include "task/task.h"

namespace cputrain::task {

using nlohmann::json;

// run_glue.py's and run_classification.py's own flags, with their defaults.
struct ClassifyOptions {
  std::string task_name, text_column_names, text_column_delimiter = " ";
  std::string label_column_name = "label", sentence1_key, sentence2_key;
  std::string problem_type, metric_name, validation_mismatched_file;
  bool pad_to_max_length = false, shuffle_train_dataset = false, do_regression = false;
};

// One file's rows: token ids (flat, each row's [begin, end)), where each row's second text
// starts, and its targets. For MNLI the validation split also holds the mismatched file's rows
// after the matched ones.
class ClassifySplit final : public Split {
 public:
  std::size_t rows() const override { return begin_.size() - 1; }
  std::size_t examples() const override { return rows(); }
  int length(std::size_t i) const override { return static_cast<int>(begin_[i + 1] - begin_[i]); }
  void Load(std::size_t i, int r, int T, model::Activations& a) const override {
    const std::size_t at = static_cast<std::size_t>(r) * T;
    const int n = length(i);
    std::copy(ids_.begin() + begin_[i], ids_.begin() + begin_[i + 1], a.inputs + at);
    std::fill(a.inputs + at + n, a.inputs + at + T, pad_);
    if (a.types) {  // BERT: 0 through the first [SEP], 1 for the second text, 0 for the padding
      for (int t = 0; t < T; ++t) a.types[at + t] = t >= second_[i] && t < n ? 1 : 0;
    }
    a.lengths[r] = n;
    a.starts[r] = label_.empty() ? 0 : label_[i];
    if (!values_.empty() && a.label_values) {
      std::copy(values_.begin() + i * K_, values_.begin() + (i + 1) * K_, a.label_values + r * K_);
    }
  }
  bool dynamic_padding() const override { return dynamic_; }
  const std::string& path() const override { return path_; }
  const char* unit() const override { return "rows"; }

  std::string path_;
  std::vector<std::int32_t> ids_;
  std::vector<std::size_t> begin_ = {0};
  std::vector<int> second_, label_;  // label_: single-label ids (empty without labels)
  std::vector<float> values_;        // rows x K_: regression / multi-label targets
  std::size_t K_ = 1;
  int pad_ = 0;
  bool dynamic_ = true;
  bool labelled_ = false;
  std::size_t matched_ = 0;  // MNLI: the rows of the validation file before the mismatched one's
};

// The columns a file's rows are read from.
struct Columns {
  std::vector<std::size_t> joined;           // run_classification.py's --text_column_names
  std::size_t first = 0, second = SIZE_MAX;  // one text, or a pair
  std::size_t label = SIZE_MAX;              // absent (a test file)
};

class ClassifyTask final : public Task {
 public:
  const TaskInfo& info() const override;
  std::vector<Option> Options() override;
  void CheckFlags(const Args& args, Command command) override;
  model::HeadSpec ModelHead() const override {
    model::HeadSpec h(model::Head::kClassify);
    h.pad_token = 0;  // the body's check only: Head() gives the real one
    return h;
  }
  void CheckModel(const model::Shape& s, const Args& args) override;
  void OpenTokenizer(const Args& args) override;
  std::unique_ptr<Split> Read(SplitKind kind, const Args& args) override;
  model::HeadSpec Head(const model::Shape& model, Command command) const override;
  void AnnotateConfig(json& config) const override {
    WriteLabels(labels_, &config);
    if (glue_) config["finetuning_task"] = glue_->name;
  }
  Outcome Finish(SplitKind kind, const Split& split, const Logits& logits,
                 const Args& args) override;
  // `classify features`: a file's rows as the model reads them (for tests: the ids against
  // transformers' tokenizers).
  std::vector<Extra> Extras() override;

 private:
  Columns ColumnsOf(const Table& t, bool labelled) const;
  std::unique_ptr<Split> ReadSplit(SplitKind kind, const Args& args);
  void BuildLabels(const Table& train, std::size_t column, const Args& args);
  void AddRows(const Table& t, const Columns& c, ClassifySplit* s) const;
  json Metrics(const ClassifySplit& s, const Logits& logits, std::size_t begin,
               std::size_t end) const;
  std::vector<std::string> MetricNames() const;
  void CheckMetric() const;

  ClassifyOptions o_;
  Command command_ = Command::kTrain;
  const GlueTask* glue_ = nullptr;
  std::unique_ptr<data::Tokenizer> tokenizer_;
  std::unique_ptr<PairEncoder> encoder_;
  json model_config_ = json::object();  // --model_name_or_path's config.json (if it has one)
  int pad_ = 0;
  Labels labels_;
  bool have_labels_ = false;  // built (train) or read from the model
  // --model_name_or_path as CheckModel saw it: a trained classifier (its outputs and loss), or a
  // body a new head goes on.
  bool model_classifier_ = false;
  int model_labels_ = 0;
  int model_vocab_ = 0;  // its vocab_size: every token id of a row is below it (0: no model)
  model::ProblemType model_problem_ = model::ProblemType::kSingleLabel;
};

}  // namespace cputrain::task
