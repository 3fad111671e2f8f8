// The classification task's head and what becomes of its predictions (classify_task.h): evaluate's
// metrics and eval_loss for a labelled file, predict_results.txt for a test file, as run_glue.py
// and run_classification.py write them.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/files.h"
#include "model/family.h"
#include "task/classify/classify_task.h"
#include "task/classify/metrics.h"

namespace cputrain::task {
namespace {

namespace fs = std::filesystem;
using model::ProblemType;

// The loss of one row's logits as the model computes it (model/head.h), in double.
double RowLoss(ProblemType problem, const float* l, int K, int label, const float* y) {
  if (problem == ProblemType::kSingleLabel) {
    const double m = *std::max_element(l, l + K);
    double sum = 0;
    for (int k = 0; k < K; ++k) sum += std::exp(l[k] - m);
    return m + std::log(sum) - l[label];
  }
  double loss = 0;
  for (int k = 0; k < K; ++k) {
    const double x = l[k];
    loss += problem == ProblemType::kRegression
                ? (x - y[k]) * (x - y[k])
                : std::max(x, 0.0) - x * y[k] + std::log1p(std::exp(-std::fabs(x)));
  }
  return loss / K;
}

// numpy's argmax: the first largest.
int Argmax(const float* l, int K) { return static_cast<int>(std::max_element(l, l + K) - l); }

// Python's repr of a label list: ['a', 'b'] (strings quoted), [1, 2].
std::string PyList(const std::vector<std::string>& items, bool quoted) {
  std::string s = "[";
  for (std::size_t i = 0; i < items.size(); ++i) {
    s += (i ? ", " : "") + (quoted ? "'" + items[i] + "'" : items[i]);
  }
  return s + "]";
}

}  // namespace

model::HeadSpec ClassifyTask::Head(const model::Shape& model, Command command) const {
  CheckMetric();
  model::HeadSpec h(model::Head::kClassify);
  h.pad_token = pad_;
  if (command != Command::kTrain) {  // the trained model's own outputs and loss
    h.labels = labels_.outputs();
    h.problem = labels_.problem;
    return h;
  }
  if (model_classifier_ && model.labels != labels_.outputs()) {
    throw InputError(
        fmt::format("--model_name_or_path is a classifier of {} outputs; the "
                    "training file has {} labels ({})",
                    model.labels, labels_.outputs(), model::ProblemName(labels_.problem)),
        "fine-tune its base model (a new head is made for these labels), or train on "
        "data with its labels");
  }
  h.labels = labels_.outputs();
  h.problem = labels_.problem;
  return h;
}

// The metrics this run reports: the GLUE task's, --metric_name, else the problem's default.
std::vector<std::string> ClassifyTask::MetricNames() const {
  if (glue_) return std::vector<std::string>(glue_->metrics.begin(), glue_->metrics.end());
  if (!o_.metric_name.empty()) return {o_.metric_name};
  return {labels_.problem == ProblemType::kRegression   ? "mse"
          : labels_.problem == ProblemType::kMultiLabel ? "f1"
                                                        : "accuracy"};
}

// A metric that does not score the problem is refused before any work.
void ClassifyTask::CheckMetric() const {
  const bool regression = labels_.problem == ProblemType::kRegression;
  for (const std::string& n : MetricNames()) {
    const bool regression_metric = n == "pearson" || n == "spearmanr" || n == "mse";
    if (regression_metric == regression) continue;
    throw InputError(
        fmt::format("--metric_name {} does not score a {}", n, model::ProblemName(labels_.problem)),
        regression ? "a regression takes mse, pearson or spearmanr"
                   : "labels take accuracy, f1 or matthews_correlation");
  }
}

// The metrics of rows [begin, end) of a labelled split, with their keys.
json ClassifyTask::Metrics(const ClassifySplit& s, const Logits& logits, std::size_t begin,
                           std::size_t end) const {
  const int K = labels_.outputs();
  const ProblemType problem = labels_.problem;
  std::vector<int> pred, ref;
  std::vector<double> x, y;
  double loss = 0;
  for (std::size_t i = begin; i < end; ++i) {
    const float* l = logits.row(i);
    const float* v = s.values_.empty() ? nullptr : s.values_.data() + i * s.K_;
    loss += RowLoss(problem, l, K, s.label_.empty() ? 0 : s.label_[i], v);
    if (problem == ProblemType::kSingleLabel) {
      pred.push_back(Argmax(l, K));
      ref.push_back(s.label_[i]);
    } else if (problem == ProblemType::kRegression) {
      x.push_back(l[0]);  // float32 logits and labels, compared in float64 as numpy does
      y.push_back(v[0]);
    } else {
      for (int k = 0; k < K; ++k) {
        pred.push_back(l[k] > 0 ? 1 : 0);
        ref.push_back(v[k] > 0.5f ? 1 : 0);
      }
    }
  }
  const std::vector<std::string> names = MetricNames();
  const bool multi = problem == ProblemType::kMultiLabel;
  json m = json::object();  // keys sorted, as the Trainer's save_metrics writes them
  for (const std::string& n : names) {
    if (n == "accuracy") m[n] = multi ? SubsetAccuracy(pred, ref, K) : Accuracy(pred, ref);
    if (n == "f1") m[n] = multi ? MicroF1(pred, ref) : F1(pred, ref, K);
    if (n == "matthews_correlation") m[n] = MatthewsCorrelation(pred, ref);
    if (n == "pearson") m[n] = Pearson(x, y);
    if (n == "spearmanr") m[n] = Spearman(x, y);
    if (n == "mse") m[n] = MeanSquaredError(x, y);
  }
  if (names.size() > 1) {  // run_glue.py's combined_score: the mean of the metrics
    double sum = 0;
    for (const std::string& n : names) sum += m[n].get<double>();
    m["combined_score"] = sum / static_cast<double>(names.size());
  }
  m["loss"] = loss / static_cast<double>(end - begin);
  return m;
}

Outcome ClassifyTask::Finish(SplitKind kind, const Split& split, const Logits& logits,
                             const Args& args) {
  const auto& s = static_cast<const ClassifySplit&>(split);
  Outcome o;
  if (kind == SplitKind::kValidation) {
    if (!s.labelled_) {
      throw InputError(fmt::format("{} has no label column '{}'", s.path_, o_.label_column_name),
                       "score a labelled file, or predict it: classify predict --test_file");
    }
    std::vector<std::pair<std::string, json>> rows;
    const json matched = Metrics(s, logits, 0, s.matched_);
    for (const auto& [k, v] : matched.items()) rows.emplace_back(k, v);
    rows.emplace_back("samples", s.matched_);
    if (s.rows() > s.matched_) {  // MNLI's mismatched file: run_glue.py's _mm keys
      const json mismatched = Metrics(s, logits, s.matched_, s.rows());
      for (const auto& [k, v] : mismatched.items()) rows.emplace_back(k + "_mm", v);
      rows.emplace_back("samples_mm", s.rows() - s.matched_);
      std::sort(rows.begin(), rows.end());
    }
    json printed = json::object();
    for (const auto& [k, v] : rows) printed["eval_" + k] = v;
    o.metrics = std::move(rows);
    o.printed = printed.dump() + "\n";
    return o;
  }
  // run_glue.py's predict_results_<task>.txt; run_classification.py's predict_results.txt.
  const std::string file =
      glue_ ? fmt::format("predict_results_{}.txt", glue_->name) : "predict_results.txt";
  const int K = labels_.outputs();
  std::string out = "index\tprediction\n";
  for (std::size_t i = 0; i < s.rows(); ++i) {
    const float* l = logits.row(i);
    std::string item;
    if (labels_.problem == ProblemType::kRegression) {
      item = fmt::format("{:3.3f}", l[0]);
    } else if (labels_.problem == ProblemType::kMultiLabel) {
      std::vector<std::string> on;
      for (int k = 0; k < K; ++k)
        if (l[k] > 0) on.push_back(labels_.Name(k));
      item = PyList(on, K > 0 && labels_.names[0].is_string());
    } else {
      item = labels_.Name(Argmax(l, K));
    }
    out += fmt::format("{}\t{}\n", i, item);
  }
  WriteFileAtomic((fs::path(args.output_dir) / file).string(), out);
  o.printed = "";
  return o;
}

}  // namespace cputrain::task
