// Classification metrics as Hugging Face evaluate computes them (through scikit-learn and SciPy),
// on the predictions run_glue.py / run_classification.py make of the logits: argmax (single
// label), the logit itself (regression), logit > 0 per label (multi-label).
//
//   accuracy              sklearn accuracy_score: the share of rows predicted exactly (multi-
//                         label: every label of the row)
//   f1                    sklearn f1_score: binary (positive label 1) for two labels, micro over
//                         every label's decisions for multi-label, macro (the mean over the
//                         labels present in the references or predictions) for more than two
//   matthews_correlation  sklearn matthews_corrcoef (multiclass form; 0 when undefined)
//   pearson, spearmanr    scipy.stats pearsonr, spearmanr (average ranks for ties): GLUE's STS-B
//   mse                   sklearn mean_squared_error
// GLUE's tasks (evaluate.load("glue", task)) are sets of these: cola matthews_correlation; stsb
// pearson and spearmanr; mrpc and qqp accuracy and f1; the others accuracy.
//
// Thread safety: the functions may be called from any thread.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace cputrain::task {

double Accuracy(const std::vector<int>& predictions, const std::vector<int>& references);
// labels: the number of classes (2: binary, positive class 1).
double F1(const std::vector<int>& predictions, const std::vector<int>& references, int labels);
double MatthewsCorrelation(const std::vector<int>& predictions, const std::vector<int>& references);
double Pearson(const std::vector<double>& x, const std::vector<double>& y);
double Spearman(const std::vector<double>& x, const std::vector<double>& y);
double MeanSquaredError(const std::vector<double>& predictions,
                        const std::vector<double>& references);
// Multi-label: rows of K 0/1 decisions, flattened (rows x K).
double SubsetAccuracy(const std::vector<int>& predictions, const std::vector<int>& references,
                      int K);
double MicroF1(const std::vector<int>& predictions, const std::vector<int>& references);

}  // namespace cputrain::task
