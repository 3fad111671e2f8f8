// The metrics of metrics.h, written as scikit-learn and SciPy compute them (float64 throughout).
#include "task/classify/metrics.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>

namespace cputrain::task {
namespace {

// True, false positives and false negatives of class c.
struct Counts {
  double tp = 0, fp = 0, fn = 0;
};

Counts CountsOf(const std::vector<int>& p, const std::vector<int>& r, int c) {
  Counts k;
  for (std::size_t i = 0; i < p.size(); ++i) {
    k.tp += p[i] == c && r[i] == c;
    k.fp += p[i] == c && r[i] != c;
    k.fn += p[i] != c && r[i] == c;
  }
  return k;
}

// sklearn's F1 of counts: 2 tp / (2 tp + fp + fn), 0 when that is 0/0 (zero_division "warn").
double F1Of(const Counts& k) {
  const double d = 2 * k.tp + k.fp + k.fn;
  return d > 0 ? 2 * k.tp / d : 0.0;
}

double Mean(const std::vector<double>& x) {
  return std::accumulate(x.begin(), x.end(), 0.0) / static_cast<double>(x.size());
}

// scipy.stats.rankdata(method="average"): 1-based ranks, ties sharing their mean rank.
std::vector<double> Ranks(const std::vector<double>& x) {
  std::vector<std::size_t> order(x.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return x[a] < x[b]; });
  std::vector<double> r(x.size());
  for (std::size_t i = 0; i < order.size();) {
    std::size_t j = i;
    while (j + 1 < order.size() && x[order[j + 1]] == x[order[i]]) ++j;
    const double rank = (static_cast<double>(i) + static_cast<double>(j)) / 2 + 1;
    for (std::size_t k = i; k <= j; ++k) r[order[k]] = rank;
    i = j + 1;
  }
  return r;
}

}  // namespace

double Accuracy(const std::vector<int>& p, const std::vector<int>& r) {
  double same = 0;
  for (std::size_t i = 0; i < p.size(); ++i) same += p[i] == r[i];
  return same / static_cast<double>(p.size());
}

double F1(const std::vector<int>& p, const std::vector<int>& r, int labels) {
  if (labels <= 2) return F1Of(CountsOf(p, r, 1));
  std::set<int> present(p.begin(), p.end());
  present.insert(r.begin(), r.end());
  double sum = 0;
  for (int c : present) sum += F1Of(CountsOf(p, r, c));
  return sum / static_cast<double>(present.size());
}

double MatthewsCorrelation(const std::vector<int>& p, const std::vector<int>& r) {
  // sklearn: C the confusion matrix, t_k / p_k its row / column sums, c its trace, s its total;
  // (c s - t.p) / sqrt((s^2 - p.p)(s^2 - t.t)), 0 if the denominator is 0.
  std::map<int, double> t, q;
  double c = 0;
  const double s = static_cast<double>(p.size());
  for (std::size_t i = 0; i < p.size(); ++i) {
    t[r[i]] += 1;
    q[p[i]] += 1;
    c += p[i] == r[i];
  }
  double tp = 0, pp = 0, tt = 0;
  for (const auto& [k, v] : t) {
    tt += v * v;
    if (q.count(k)) tp += v * q[k];
  }
  for (const auto& [k, v] : q) pp += v * v;
  const double den = (s * s - pp) * (s * s - tt);
  return den == 0 ? 0.0 : (c * s - tp) / std::sqrt(den);
}

double Pearson(const std::vector<double>& x, const std::vector<double>& y) {
  // scipy: the centered vectors, each divided by its norm, then their dot product, clipped.
  const double mx = Mean(x), my = Mean(y);
  double nx = 0, ny = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    nx += (x[i] - mx) * (x[i] - mx);
    ny += (y[i] - my) * (y[i] - my);
  }
  nx = std::sqrt(nx);
  ny = std::sqrt(ny);
  if (nx == 0 || ny == 0) return std::nan("");  // scipy warns and returns nan
  double r = 0;
  for (std::size_t i = 0; i < x.size(); ++i) r += ((x[i] - mx) / nx) * ((y[i] - my) / ny);
  return std::clamp(r, -1.0, 1.0);
}

double Spearman(const std::vector<double>& x, const std::vector<double>& y) {
  return Pearson(Ranks(x), Ranks(y));
}

double MeanSquaredError(const std::vector<double>& p, const std::vector<double>& r) {
  double sum = 0;
  for (std::size_t i = 0; i < p.size(); ++i) sum += (p[i] - r[i]) * (p[i] - r[i]);
  return sum / static_cast<double>(p.size());
}

double SubsetAccuracy(const std::vector<int>& p, const std::vector<int>& r, int K) {
  const std::size_t rows = p.size() / static_cast<std::size_t>(K);
  double same = 0;
  for (std::size_t i = 0; i < rows; ++i) {
    same += std::equal(p.begin() + i * K, p.begin() + (i + 1) * K, r.begin() + i * K);
  }
  return same / static_cast<double>(rows);
}

double MicroF1(const std::vector<int>& p, const std::vector<int>& r) {
  Counts k;
  for (std::size_t i = 0; i < p.size(); ++i) {
    k.tp += p[i] == 1 && r[i] == 1;
    k.fp += p[i] == 1 && r[i] == 0;
    k.fn += p[i] == 0 && r[i] == 1;
  }
  return F1Of(k);
}

}  // namespace cputrain::task
