// The official SQuAD metrics (squad_eval.h): evaluate-v1.1.py and evaluate-v2.0.py.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/files.h"
#include "common/log.h"
#include "common/utf8.h"
#include "task/qa/squad_eval.h"
#include "text/python_text.h"

namespace cputrain::task {
namespace {

using ojson = nlohmann::ordered_json;

// sum((Counter(a) & Counter(b)).values()): tokens shared, with multiplicity.
std::size_t Common(const std::vector<std::string_view>& a, const std::vector<std::string_view>& b) {
  std::map<std::string_view, std::int64_t> count;
  for (std::string_view t : a) ++count[t];
  std::size_t same = 0;
  for (std::string_view t : b) {
    auto it = count.find(t);
    if (it != count.end() && it->second > 0) {
      --it->second;
      ++same;
    }
  }
  return same;
}

double F1FromTokens(std::size_t same, std::size_t pred, std::size_t gold) {
  // The scripts' arithmetic, in their order.
  const double precision = 1.0 * static_cast<double>(same) / static_cast<double>(pred);
  const double recall = 1.0 * static_cast<double>(same) / static_cast<double>(gold);
  return (2 * precision * recall) / (precision + recall);
}

constexpr InputKind kPredictionsFile{"predictions file", "a JSON object {id: answer text}",
                                     1ull << 30, "check --predictions"};
constexpr InputKind kNaProbFile{"no-answer probability file", "a JSON object {id: probability}",
                                1ull << 30, "check --na_prob_file"};

ojson ParseJson(const std::string& path, const InputKind& kind) {
  const std::string text = ReadUtf8File(path, kind);
  try {
    return ojson::parse(text);
  } catch (const ojson::exception& e) {  // parse_error, and out_of_range for 1e999
    throw InputError(fmt::format("{}: not JSON: {}", path, e.what()),
                     fmt::format("give {}", kind.expected));
  }
}

}  // namespace

bool ExactMatch(std::string_view prediction, std::string_view gold) {
  return NormalizeAnswer(prediction) == NormalizeAnswer(gold);
}

double F1V1(std::string_view prediction, std::string_view gold) {
  const std::string p = NormalizeAnswer(prediction), g = NormalizeAnswer(gold);
  const std::vector<std::string_view> pt = PySplit(p), gt = PySplit(g);
  const std::size_t same = Common(pt, gt);
  if (same == 0) return 0;
  return F1FromTokens(same, pt.size(), gt.size());
}

double F1V2(std::string_view prediction, std::string_view gold) {
  const std::string p = NormalizeAnswer(prediction), g = NormalizeAnswer(gold);
  const std::vector<std::string_view> pt = PySplit(p), gt = PySplit(g);
  if (pt.empty() || gt.empty()) return pt.empty() && gt.empty() ? 1 : 0;
  const std::size_t same = Common(pt, gt);
  if (same == 0) return 0;
  return F1FromTokens(same, pt.size(), gt.size());
}

namespace {

using Predictions = std::unordered_map<std::string, std::string>;
using NaProbs = std::vector<std::pair<std::string, double>>;

// evaluate-v1.1.py: EM and F1 maxed over each question's gold answers, a missing prediction 0.
SquadScores EvaluateV1(const std::vector<Example>& examples, const Predictions& predictions) {
  SquadScores s;
  double em = 0, f1 = 0;
  for (const Example& ex : examples) {
    ++s.total;
    auto it = predictions.find(ex.id);
    if (it == predictions.end()) {
      ++s.missing;
      continue;
    }
    if (ex.answer_texts.empty()) {
      throw InputError(
          fmt::format("question '{}' has no answers: SQuAD v1.1 scoring needs at least one", ex.id),
          "for SQuAD v2.0 data (unanswerable questions), add --version_2_with_negative");
    }
    double best_em = 0, best_f1 = 0;
    for (const std::string& g : ex.answer_texts) {
      best_em = std::max(best_em, ExactMatch(it->second, g) ? 1.0 : 0.0);
      best_f1 = std::max(best_f1, F1V1(it->second, g));
    }
    em += best_em;
    f1 += best_f1;
  }
  if (s.missing > 0) {
    log::Warn("{} of {} questions have no prediction: each scores 0, as evaluate-v1.1.py does",
              s.missing, s.total);
  }
  s.exact = s.total ? 100.0 * em / static_cast<double>(s.total) : 0;
  s.f1 = s.total ? 100.0 * f1 / static_cast<double>(s.total) : 0;
  return s;
}

// evaluate-v2.0.py's per-question scores: get_raw_scores (EM and F1 against the gold answers
// that normalize to something, else ""), and apply_no_ans_threshold's (a no-answer probability
// above the threshold predicts no answer).
struct V2Scores {
  std::vector<double> exact_raw, f1_raw, exact_t, f1_t;
  std::vector<bool> has_ans;
};

V2Scores RawScores(const std::vector<Example>& examples, const Predictions& predictions,
                   const NaProbs* na_probs, double na_prob_thresh) {
  std::unordered_map<std::string, double> probs;
  if (na_probs) {
    for (const auto& [id, p] : *na_probs) probs[id] = p;
  }
  const std::size_t n = examples.size();
  V2Scores v{std::vector<double>(n), std::vector<double>(n), std::vector<double>(n),
             std::vector<double>(n), std::vector<bool>(n)};
  for (std::size_t i = 0; i < n; ++i) {
    const Example& ex = examples[i];
    auto it = predictions.find(ex.id);
    if (it == predictions.end()) {
      throw InputError(fmt::format("no prediction for question '{}'", ex.id),
                       "SQuAD v2.0 scoring needs an answer for every question (\"\" for no "
                       "answer), as evaluate-v2.0.py does");
    }
    v.has_ans[i] = !ex.answer_texts.empty();
    std::vector<std::string_view> gold;
    for (const std::string& g : ex.answer_texts) {
      if (!NormalizeAnswer(g).empty()) gold.push_back(g);
    }
    if (gold.empty()) gold.push_back("");
    double em = 0, f1 = 0;
    for (std::string_view g : gold) {
      em = std::max(em, ExactMatch(g, it->second) ? 1.0 : 0.0);
      f1 = std::max(f1, F1V2(it->second, g));
    }
    v.exact_raw[i] = em;
    v.f1_raw[i] = f1;
    double p = 0;
    if (na_probs) {
      auto pit = probs.find(ex.id);
      if (pit == probs.end()) {
        throw InputError(fmt::format("no no-answer probability for question '{}'", ex.id),
                         "give every question's probability in --na_prob_file");
      }
      p = pit->second;
    }
    const bool pred_na = p > na_prob_thresh;
    v.exact_t[i] = pred_na ? (v.has_ans[i] ? 0.0 : 1.0) : em;
    v.f1_t[i] = pred_na ? (v.has_ans[i] ? 0.0 : 1.0) : f1;
  }
  return v;
}

// make_eval_dict over all questions, those with answers and those without: sums in the
// dataset's order.
void MakeEvalDict(const V2Scores& v, SquadScores* s) {
  const std::size_t n = v.has_ans.size();
  auto mean = [&](const std::vector<double>& x, int which) {
    double sum = 0;
    std::int64_t count = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (which == 0 || (which == 1) == v.has_ans[i]) {
        sum += x[i];
        ++count;
      }
    }
    return std::pair<double, std::int64_t>{count ? 100.0 * sum / static_cast<double>(count) : 0,
                                           count};
  };
  s->total = static_cast<std::int64_t>(n);
  s->exact = mean(v.exact_t, 0).first;
  s->f1 = mean(v.f1_t, 0).first;
  if (auto [e, c] = mean(v.exact_t, 1); c > 0) {
    s->has_ans_total = c;
    s->has_ans_exact = e;
    s->has_ans_f1 = mean(v.f1_t, 1).first;
  }
  if (auto [e, c] = mean(v.exact_t, 2); c > 0) {
    s->no_ans_total = c;
    s->no_ans_exact = e;
    s->no_ans_f1 = mean(v.f1_t, 2).first;
  }
}

// find_best_thresh of one raw score: questions by no-answer probability (a stable sort of the
// file's order), the threshold after the best running score.
void FindBestThresh(const std::vector<Example>& examples, const Predictions& predictions,
                    const NaProbs& na_probs, const V2Scores& v, const std::vector<double>& raw,
                    double* score, double* thresh) {
  const std::size_t n = examples.size();
  std::unordered_map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < n; ++i) index[examples[i].id] = i;
  NaProbs order = na_probs;
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.second < b.second; });
  std::int64_t num_no_ans = 0;
  for (std::size_t i = 0; i < n; ++i) num_no_ans += v.has_ans[i] ? 0 : 1;
  double cur = static_cast<double>(num_no_ans), best_score = cur, best_thresh = 0.0;
  for (const auto& [id, p] : order) {
    auto it = index.find(id);
    if (it == index.end()) continue;  // `if qid not in scores: continue`
    const std::size_t i = it->second;
    cur += v.has_ans[i] ? raw[i] : (predictions.at(id).empty() ? 0 : -1);
    if (cur > best_score) {
      best_score = cur;
      best_thresh = p;
    }
  }
  *score = 100.0 * best_score / static_cast<double>(n);
  *thresh = best_thresh;
}

}  // namespace

SquadScores EvaluatePredictions(const std::vector<Example>& examples,
                                const std::unordered_map<std::string, std::string>& predictions,
                                bool v2,
                                const std::vector<std::pair<std::string, double>>* na_probs,
                                double na_prob_thresh) {
  if (!v2) return EvaluateV1(examples, predictions);
  // evaluate-v2.0.py: raw scores, the no-answer threshold, totals over all / HasAns / NoAns,
  // and with no-answer probabilities the best thresholds.
  SquadScores s;
  s.version_2 = true;
  const V2Scores v = RawScores(examples, predictions, na_probs, na_prob_thresh);
  MakeEvalDict(v, &s);
  if (na_probs) {
    s.has_best = true;
    FindBestThresh(examples, predictions, *na_probs, v, v.exact_raw, &s.best_exact,
                   &s.best_exact_thresh);
    FindBestThresh(examples, predictions, *na_probs, v, v.f1_raw, &s.best_f1, &s.best_f1_thresh);
  }
  return s;
}

std::string SquadScores::ToJson() const {
  ojson j;
  if (!version_2) {
    // json.dumps' separators: ", " and ": ".
    return fmt::format("{{\"exact_match\": {}, \"f1\": {}}}", ojson(exact).dump(),
                       ojson(f1).dump());
  }
  j["exact"] = exact;
  j["f1"] = f1;
  j["total"] = total;
  if (has_ans_total) {
    j["HasAns_exact"] = has_ans_exact;
    j["HasAns_f1"] = has_ans_f1;
    j["HasAns_total"] = *has_ans_total;
  }
  if (no_ans_total) {
    j["NoAns_exact"] = no_ans_exact;
    j["NoAns_f1"] = no_ans_f1;
    j["NoAns_total"] = *no_ans_total;
  }
  if (has_best) {
    j["best_exact"] = best_exact;
    j["best_exact_thresh"] = best_exact_thresh;
    j["best_f1"] = best_f1;
    j["best_f1_thresh"] = best_f1_thresh;
  }
  return j.dump(2);
}

std::unordered_map<std::string, std::string> ReadPredictions(const std::string& path) {
  const ojson doc = ParseJson(path, kPredictionsFile);
  std::unordered_map<std::string, std::string> out;
  auto add = [&](const std::string& id, const ojson& text, const std::string& where) {
    if (!text.is_string()) {
      throw InputError(
          fmt::format("{}: {}: the answer is {}, not a string", path, where, text.type_name()),
          "give each question's answer text (\"\" for no answer)");
    }
    out[id] = text.get<std::string>();
  };
  if (doc.is_object()) {
    for (const auto& [id, text] : doc.items()) add(id, text, fmt::format("id '{}'", id));
  } else if (doc.is_array()) {
    for (std::size_t i = 0; i < doc.size(); ++i) {
      const ojson& r = doc[i];
      if (!r.is_object() || !r.contains("id") || !r["id"].is_string() ||
          !r.contains("prediction_text")) {
        throw InputError(
            fmt::format("{}: entry {} is not {{\"id\": ..., \"prediction_text\": ...}}", path, i),
            "give {id: text} as evaluate-v1.1.py reads it");
      }
      add(r["id"].get<std::string>(), r["prediction_text"], fmt::format("entry {}", i));
    }
  } else {
    throw InputError(fmt::format("{}: JSON {}, not predictions", path, doc.type_name()),
                     "give {id: answer text}, as predictions.json");
  }
  return out;
}

std::vector<std::pair<std::string, double>> ReadNaProbs(const std::string& path) {
  const ojson doc = ParseJson(path, kNaProbFile);
  if (!doc.is_object()) {
    throw InputError(fmt::format("{}: JSON {}, not {{id: probability}}", path, doc.type_name()),
                     "give the no-answer probabilities as {id: number} (null_odds.json)");
  }
  std::vector<std::pair<std::string, double>> out;
  for (const auto& [id, p] : doc.items()) {
    if (!p.is_number()) {
      throw InputError(fmt::format("{}: id '{}': {} is not a number", path, id, p.dump()),
                       "give each question's no-answer probability as a number");
    }
    out.emplace_back(id, p.get<double>());
  }
  return out;
}

}  // namespace cputrain::task
