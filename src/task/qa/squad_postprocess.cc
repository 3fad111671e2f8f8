// Postprocess: utils_qa.py's postprocess_qa_predictions (squad_eval.h), step for step.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>

#include "common/error.h"
#include "common/files.h"
#include "task/qa/squad_eval.h"

namespace cputrain::task {
namespace {

struct Candidate {
  data::Offset offsets;
  float score, start_logit, end_logit;
  std::string text;
};

// np.argsort(logits)[-1:-n-1:-1]: the n largest, largest first. numpy's default sort is not
// stable; ties (rare with real logits) go to the higher index, as a stable ascending sort read
// backwards would give.
std::vector<int> TopIndices(const float* logits, int T, int n, std::vector<int>* scratch) {
  scratch->resize(static_cast<std::size_t>(T));
  std::iota(scratch->begin(), scratch->end(), 0);
  const int k = std::min(n, T);
  std::partial_sort(scratch->begin(), scratch->begin() + k, scratch->end(), [&](int a, int b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a > b;
  });
  return {scratch->begin(), scratch->begin() + k};
}

}  // namespace

QaPredictions Postprocess(const std::vector<Example>& examples, const QaFeatures& features,
                          const float* start_logits, const float* end_logits,
                          const PostprocessOptions& o) {
  if (o.n_best_size < 1 || o.max_answer_length < 1) {
    throw InputError(fmt::format("n_best_size {} and max_answer_length {} must be >= 1",
                                 o.n_best_size, o.max_answer_length));
  }
  CPUTRAIN_CHECK(features.has_offsets(), "Postprocess needs features made with keep_offsets");
  CPUTRAIN_CHECK(features.num_examples() == examples.size(), "features made from other examples");
  const int T = features.max_seq_length();
  QaPredictions out;
  std::vector<int> scratch;
  for (std::size_t e = 0; e < examples.size(); ++e) {
    const Example& ex = examples[e];
    std::vector<Candidate> prelim;
    Candidate min_null{};
    bool have_null = false;
    for (std::size_t f = features.first_feature(e); f < features.first_feature(e + 1); ++f) {
      const float* sl = start_logits + f * static_cast<std::size_t>(T);
      const float* el = end_logits + f * static_cast<std::size_t>(T);
      const std::span<const data::Offset> off = features.offsets(f);
      const float null_score = sl[0] + el[0];
      if (!have_null || min_null.score > null_score) {
        min_null = {{0, 0}, null_score, sl[0], el[0], ""};
        have_null = true;
      }
      const std::vector<int> starts = TopIndices(sl, T, o.n_best_size, &scratch);
      const std::vector<int> ends = TopIndices(el, T, o.n_best_size, &scratch);
      for (int s : starts) {
        for (int en : ends) {
          if (off[s].begin == kNoOffset.begin || off[en].begin == kNoOffset.begin) continue;
          if (en < s || en - s + 1 > o.max_answer_length) continue;
          prelim.push_back({{off[s].begin, off[en].end}, sl[s] + el[en], sl[s], el[en], ""});
        }
      }
    }
    if (o.version_2_with_negative) prelim.push_back(min_null);
    // sorted(..., reverse=True) is stable: equal scores keep their order.
    std::stable_sort(prelim.begin(), prelim.end(),
                     [](const Candidate& a, const Candidate& b) { return a.score > b.score; });
    if (prelim.size() > static_cast<std::size_t>(o.n_best_size)) prelim.resize(o.n_best_size);
    auto is_null_offsets = [](const Candidate& c) {
      return c.offsets.begin == 0 && c.offsets.end == 0;
    };
    if (o.version_2_with_negative && std::none_of(prelim.begin(), prelim.end(), is_null_offsets)) {
      prelim.push_back(min_null);
    }
    for (Candidate& c : prelim) {
      const std::size_t b = std::min<std::size_t>(c.offsets.begin, ex.context.size());
      const std::size_t en = std::min<std::size_t>(c.offsets.end, ex.context.size());
      c.text = en > b ? ex.context.substr(b, en - b) : "";
    }
    if (prelim.empty() || (prelim.size() == 1 && prelim[0].text.empty())) {
      prelim.insert(prelim.begin(), Candidate{{0, 0}, 0.0f, 0.0f, 0.0f, "empty"});
    }
    // Softmax over the scores (utils_qa.py: numpy in float32; double here, within 1e-6).
    double max_score = -INFINITY, sum = 0;
    for (const Candidate& c : prelim) max_score = std::max<double>(max_score, c.score);
    std::vector<NbestAnswer> nbest;
    for (const Candidate& c : prelim) {
      const double p = std::exp(static_cast<double>(c.score) - max_score);
      sum += p;
      nbest.push_back({c.text, c.start_logit, c.end_logit, p});
    }
    for (NbestAnswer& a : nbest) a.probability /= sum;
    out.ids.push_back(ex.id);
    if (!o.version_2_with_negative) {
      out.answers.push_back(nbest[0].text);
    } else {
      std::size_t i = 0;
      while (i + 1 < nbest.size() && nbest[i].text.empty()) ++i;
      // float32 arithmetic, in the script's order.
      const float diff = min_null.score - nbest[i].start_logit - nbest[i].end_logit;
      out.null_odds.push_back(diff);
      out.answers.push_back(diff > o.null_score_diff_threshold ? "" : nbest[i].text);
    }
    out.nbest.push_back(std::move(nbest));
  }
  return out;
}

void WritePredictions(const QaPredictions& p, const std::string& dir, const std::string& prefix,
                      bool v2) {
  using ojson = nlohmann::ordered_json;
  MakeDirs(dir);
  ojson preds = ojson::object(), nbest = ojson::object(), odds = ojson::object();
  for (std::size_t i = 0; i < p.ids.size(); ++i) {
    preds[p.ids[i]] = p.answers[i];
    ojson list = ojson::array();
    for (const NbestAnswer& a : p.nbest[i]) {
      ojson entry;
      entry["start_logit"] = static_cast<double>(a.start_logit);
      entry["end_logit"] = static_cast<double>(a.end_logit);
      entry["text"] = a.text;
      entry["probability"] = a.probability;
      list.push_back(std::move(entry));
    }
    nbest[p.ids[i]] = std::move(list);
    if (v2) odds[p.ids[i]] = static_cast<double>(p.null_odds[i]);
  }
  // json.dumps(..., indent=4) escapes non-ASCII (ensure_ascii) and ends with a newline.
  auto dump = [](const ojson& j) { return j.dump(4, ' ', /*ensure_ascii=*/true) + "\n"; };
  WriteFileAtomic(dir + "/" + prefix + "predictions.json", dump(preds));
  WriteFileAtomic(dir + "/" + prefix + "nbest_predictions.json", dump(nbest));
  if (v2) WriteFileAtomic(dir + "/" + prefix + "null_odds.json", dump(odds));
}

}  // namespace cputrain::task
