// From start/end logits to answers, and answers to scores (docs/question-answering.md):
//
// Postprocess is utils_qa.py's postprocess_qa_predictions: per example, over all its features,
// the n_best_size largest start and end logits, pairs kept when both are context tokens, end >=
// start and end - start + 1 <= max_answer_length, scored start + end (float32, as numpy); the
// n_best_size best over all windows, with softmax probabilities. SQuAD v2.0: the null answer
// scores the minimum over features of logit[CLS] start + end, and wins when null - best
// non-null > null_score_diff_threshold.
//
// EvaluatePredictions is the official evaluate-v1.1.py (exact_match, f1) or evaluate-v2.0.py
// (exact, f1, total, HasAns_*, NoAns_*, and best_* with no-answer probabilities): answers
// normalized as normalize_answer (python_text.h), EM and token F1 maxed over the gold answers.
//
// Thread safety: the functions may be called from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "task/qa/squad.h"
#include "task/qa/squad_features.h"

namespace cputrain::task {

struct PostprocessOptions {
  bool version_2_with_negative = false;
  int n_best_size = 20;
  int max_answer_length = 30;
  float null_score_diff_threshold = 0.0f;
};

struct NbestAnswer {
  std::string text;
  float start_logit = 0, end_logit = 0;
  double probability = 0;
};

struct QaPredictions {
  std::vector<std::string> ids;                 // the examples' ids, in order
  std::vector<std::string> answers;             // predictions.json: the text, "" for no answer
  std::vector<std::vector<NbestAnswer>> nbest;  // nbest_predictions.json
  std::vector<float> null_odds;                 // v2.0: null score - best non-null score
};

// start_logits and end_logits are (features.size(), T), features made with keep_offsets.
// Throws InputError for options out of range (n_best_size, max_answer_length >= 1).
QaPredictions Postprocess(const std::vector<Example>& examples, const QaFeatures& features,
                          const float* start_logits, const float* end_logits,
                          const PostprocessOptions& options);

// Writes <dir>/<prefix>predictions.json, <prefix>nbest_predictions.json and, for v2.0,
// <prefix>null_odds.json as utils_qa.py does (prefix "eval_" gives its eval_predictions.json).
void WritePredictions(const QaPredictions& predictions, const std::string& dir,
                      const std::string& prefix, bool version_2_with_negative);

// ---- metrics

// The official scripts' per-answer scores. F1V1 is evaluate-v1.1.py's f1_score (0 when either
// side normalizes to nothing); F1V2 is evaluate-v2.0.py's compute_f1 (1 when both do).
bool ExactMatch(std::string_view prediction, std::string_view gold);
double F1V1(std::string_view prediction, std::string_view gold);
double F1V2(std::string_view prediction, std::string_view gold);

struct SquadScores {
  bool version_2 = false;
  double exact = 0, f1 = 0;  // percentages; v1.1's exact_match and f1
  std::int64_t total = 0;
  std::int64_t missing = 0;  // questions without a prediction (v1.1 scores them 0)
  // v2.0
  std::optional<std::int64_t> has_ans_total, no_ans_total;
  double has_ans_exact = 0, has_ans_f1 = 0, no_ans_exact = 0, no_ans_f1 = 0;
  bool has_best = false;  // with no-answer probabilities
  double best_exact = 0, best_exact_thresh = 0, best_f1 = 0, best_f1_thresh = 0;

  // What the official script prints: v1.1 {"exact_match": .., "f1": ..} on one line, v2.0
  // {"exact", "f1", "total", "HasAns_exact", ...} indented by 2, keys in its order.
  std::string ToJson() const;
};

// predictions: question id -> answer text. na_probs (v2.0, optional): id -> probability of no
// answer, in the file's order (evaluate-v2.0.py breaks ties in that order). v1.1: a missing
// prediction scores 0 (with a warning, as the script prints); an example without answers is an
// InputError (the script fails; use v2.0). v2.0: a missing prediction or no-answer probability
// is an InputError (the script fails with a KeyError).
SquadScores EvaluatePredictions(
    const std::vector<Example>& examples,
    const std::unordered_map<std::string, std::string>& predictions, bool version_2_with_negative,
    const std::vector<std::pair<std::string, double>>* na_probs = nullptr,
    double na_prob_thresh = 1.0);

// A predictions.json ({id: text}, or Hugging Face's [{"id", "prediction_text"}]) and an
// na_prob_file ({id: probability}); InputError naming the file when malformed.
std::unordered_map<std::string, std::string> ReadPredictions(const std::string& path);
std::vector<std::pair<std::string, double>> ReadNaProbs(const std::string& path);

}  // namespace cputrain::task
