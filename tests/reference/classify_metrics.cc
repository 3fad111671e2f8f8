// classify_metrics CASES.json OUT.json: our classification metrics (src/task/classify/metrics.h)
// on given predictions, for classify_parity.py's comparison with scikit-learn and SciPy.
//
//   CASES  a JSON list of {"kind": "labels" | "regression" | "multilabel", "K": classes,
//          "p": predictions, "r": references} (labels: ints; regression: numbers; multilabel:
//          rows of K 0/1)
//   OUT    a JSON list, one object per case: labels {accuracy, f1, matthews_correlation};
//          regression {pearson, spearmanr, mse}; multilabel {accuracy, f1}
// Exit 0 on success, 1 with a message otherwise.
#include <cstdio>
#include <exception>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "task/classify/metrics.h"

int main(int argc, char** argv) {
  using nlohmann::json;
  using namespace cputrain::task;
  if (argc != 3) {
    std::fprintf(stderr, "usage: classify_metrics CASES.json OUT.json\n");
    return 1;
  }
  try {
    std::ifstream in(argv[1]);
    const json cases = json::parse(in);
    json out = json::array();
    for (const json& c : cases) {
      const std::string kind = c.at("kind");
      const int K = c.at("K");
      json m;
      if (kind == "labels") {
        const auto p = c.at("p").get<std::vector<int>>(), r = c.at("r").get<std::vector<int>>();
        m = {{"accuracy", Accuracy(p, r)},
             {"f1", F1(p, r, K)},
             {"matthews_correlation", MatthewsCorrelation(p, r)}};
      } else if (kind == "regression") {
        const auto p = c.at("p").get<std::vector<double>>();
        const auto r = c.at("r").get<std::vector<double>>();
        m = {{"pearson", Pearson(p, r)},
             {"spearmanr", Spearman(p, r)},
             {"mse", MeanSquaredError(p, r)}};
      } else {
        std::vector<int> p, r;
        for (const json& row : c.at("p"))
          for (const json& x : row) p.push_back(x.get<int>());
        for (const json& row : c.at("r"))
          for (const json& x : row) r.push_back(x.get<int>());
        m = {{"accuracy", SubsetAccuracy(p, r, K)}, {"f1", MicroF1(p, r)}};
      }
      out.push_back(m);
    }
    std::ofstream(argv[2]) << out.dump();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "classify_metrics: %s\n", e.what());
    return 1;
  }
}
