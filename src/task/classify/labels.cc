// Label lists and targets (labels.h).
#include "task/classify/labels.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_set>

#include "common/error.h"
#include "common/log.h"
#include "model/limits.h"

namespace cputrain::task {
namespace {

using model::ProblemType;
using nlohmann::json;

[[noreturn]] void BadLabel(const LabelColumn& c, std::size_t r, const std::string& what,
                           const std::string& hint) {
  throw InputError(fmt::format("{}, line {}: the label {}", c.table->path, c.table->lines[r], what),
                   hint);
}

const json& Cell(const LabelColumn& c, std::size_t r) { return c.table->rows[r][c.column]; }

// Integers sort before strings; integers numerically, strings by code point (UTF-8 bytes).
bool Before(const json& a, const json& b) {
  if (a.is_number_integer() != b.is_number_integer()) return a.is_number_integer();
  if (a.is_number_integer()) return a.get<long long>() < b.get<long long>();
  return a.get_ref<const std::string&>() < b.get_ref<const std::string&>();
}

// The problem the training column's values make.
ProblemType Infer(const LabelColumn& train) {
  bool lists = false, fractions = false;
  for (std::size_t r = 0; r < train.table->rows.size(); ++r) {
    const json& v = Cell(train, r);
    lists = lists || v.is_array();
    fractions = fractions || v.is_number_float();
  }
  return lists       ? ProblemType::kMultiLabel
         : fractions ? ProblemType::kRegression
                     : ProblemType::kSingleLabel;
}

// The distinct single labels of a column appended to *set (null, -1: skipped), each an integer
// or a string; *seen holds the keys (LabelKey) of every label met so far, in this column or
// before. More than kMaxLabels is refused as soon as it is found.
void Collect(const LabelColumn& c, bool multi, std::vector<json>* set,
             std::unordered_set<std::string>* seen) {
  const auto add = [&](std::size_t r, const json& x) {
    if (x.is_null() || (x.is_number_integer() && x.get<long long>() == -1)) return;
    if (!x.is_number_integer() && !x.is_string()) {
      BadLabel(c, r, fmt::format("is {}, not an integer or a string", x.dump()),
               multi ? "a multi-label row lists its labels: [\"a\", \"b\"]"
                     : "use integer or string labels, or --problem_type regression");
    }
    if (!seen->insert(LabelKey(x)).second) return;
    set->push_back(x);
    if (seen->size() > static_cast<std::size_t>(model::kMaxLabels)) {
      throw InputError(fmt::format("{}: more than {} distinct labels (line {} brings one more)",
                                   c.table->path, model::kMaxLabels, c.table->lines[r]),
                       "check --label_column_name: is it the label column?");
    }
  };
  for (std::size_t r = 0; r < c.table->rows.size(); ++r) {
    const json& v = Cell(c, r);
    if (multi && v.is_array()) {
      for (const json& x : v) add(r, x);
    } else {
      add(r, v);
    }
  }
}

// config.json's label2id keys are the labels' names (Python's str()): 1 and "1" would share one.
void CheckNamesDiffer(const Labels& l, const std::string& path) {
  std::unordered_map<std::string, int> by_name;
  for (int i = 0; i < static_cast<int>(l.names.size()); ++i) {
    const auto [it, added] = by_name.emplace(l.Name(i), i);
    if (added) continue;
    throw InputError(fmt::format("{}: the labels {} and {} are both '{}' in config.json's label2id",
                                 path, l.names[it->second].dump(), l.names[i].dump(), it->first),
                     "write every label as one JSON type: integers or strings");
  }
}

}  // namespace

int Labels::outputs() const {
  return problem == ProblemType::kRegression ? 1 : static_cast<int>(names.size());
}

std::string Labels::Name(int id) const {
  const json& n = names.at(static_cast<std::size_t>(id));
  return n.is_string() ? n.get<std::string>() : n.dump();
}

std::string LabelKey(const json& value) {
  std::string key = value.is_string() ? value.get<std::string>() : value.dump();
  key.push_back(value.is_string() ? 's' : value.is_number_integer() ? 'i' : 'j');
  return key;
}

void Labels::Index() {
  ids.clear();
  for (std::size_t i = 0; i < names.size(); ++i)
    ids.emplace(LabelKey(names[i]), static_cast<int>(i));
}

int Labels::Id(const json& value) const {
  auto it = ids.find(LabelKey(value));
  if (it != ids.end()) return it->second;
  if (!value.is_number_integer()) return -1;
  // A label read as an integer from one file and written as its digits in config.json.
  it = ids.find(LabelKey(json(value.dump())));
  if (it != ids.end()) return it->second;
  const long long id = value.get<long long>();
  return default_names && id >= 0 && id < outputs() ? static_cast<int>(id) : -1;
}

Labels LabelsFromData(const LabelColumn& train, const std::vector<LabelColumn>& others,
                      const GlueTask* glue, std::optional<ProblemType> forced) {
  Labels l;
  l.problem = forced ? *forced
              : glue ? (glue->labels.empty() ? ProblemType::kRegression : ProblemType::kSingleLabel)
                     : Infer(train);
  if (l.problem == ProblemType::kRegression) return l;
  if (glue && !glue->labels.empty()) {
    for (const char* n : glue->labels) l.names.emplace_back(n);
    l.Index();
    return l;
  }
  const bool multi = l.problem == ProblemType::kMultiLabel;
  std::unordered_set<std::string> seen;
  Collect(train, multi, &l.names, &seen);
  for (const LabelColumn& c : others) {
    std::vector<json> extra;
    Collect(c, multi, &extra, &seen);
    for (const json& x : extra) {
      log::Warn(
          "label {} is in {} but not in the training file: added to the label list (as "
          "run_classification.py adds it)",
          x.dump(), c.table->path);
      l.names.push_back(x);
    }
  }
  std::sort(l.names.begin(), l.names.end(), Before);
  if (multi && l.names.empty()) {
    throw InputError(fmt::format("{}: no row lists a label: a multi-label classifier needs one "
                                 "or more (every row's list is empty)",
                                 train.table->path),
                     "check --label_column_name; each row lists its labels: [\"a\", \"b\"]");
  }
  if (l.names.size() < 2 && !multi) {
    throw InputError(fmt::format("{}: {} distinct label(s): a classifier needs two or more",
                                 train.table->path, l.names.size()),
                     "check --label_column_name, or pass --problem_type regression for numbers");
  }
  CheckNamesDiffer(l, train.table->path);
  l.Index();
  return l;
}

Labels LabelsFromModel(const json& config, int outputs, ProblemType problem) {
  Labels l;
  l.problem = problem;
  if (problem == ProblemType::kRegression) return l;
  const json id2label = config.is_object() ? config.value("id2label", json::object()) : json();
  for (int i = 0; i < outputs; ++i) {
    const std::string key = std::to_string(i);
    l.names.push_back(id2label.is_object() && id2label.contains(key)
                          ? id2label[key]
                          : json(fmt::format("LABEL_{}", i)));
  }
  // transformers' defaults (LABEL_i) name no label of the data: a row may hold the name (a file
  // whose labels were LABEL_i) or the id (integer labels).
  l.default_names = true;
  for (int i = 0; i < outputs; ++i) {
    l.default_names = l.default_names && l.names[i] == fmt::format("LABEL_{}", i);
  }
  l.Index();
  return l;
}

void RowTargets(const Labels& l, const LabelColumn& c, std::size_t r, int* id, float* values) {
  const json& v = Cell(c, r);
  if (v.is_null()) {
    BadLabel(c, r, "is missing", "every row of a labelled file needs its label");
  }
  if (l.problem == ProblemType::kRegression) {
    if (!v.is_number()) {
      BadLabel(c, r, fmt::format("is {}, not a number", v.dump()),
               "a regression's labels are numbers");
    }
    // The targets are float32: inf, nan and what rounds to inf (1e39) would make every loss
    // inf ("training diverged") or an evaluation's metrics null.
    const double x = v.get<double>();
    if (!std::isfinite(x) || std::fabs(x) > std::numeric_limits<float>::max()) {
      BadLabel(c, r, fmt::format("is {}, not a finite float32 number", x),
               fmt::format("a regression's labels are finite numbers of magnitude at most {:g} "
                           "(float32's largest): fix the row",
                           std::numeric_limits<float>::max()));
    }
    values[0] = static_cast<float>(x);
    return;
  }
  if (l.problem == ProblemType::kMultiLabel) {
    std::fill(values, values + l.outputs(), 0.f);
    for (const json& x : v.is_array() ? v : json::array({v})) {
      const int k = l.Id(x);
      if (k < 0) BadLabel(c, r, fmt::format("{} is not a label", x.dump()), "fix the row");
      values[k] = 1.f;
    }
    return;
  }
  // A GLUE task's rows may hold the label's index instead of its name.
  *id = l.Id(v);
  if (*id < 0 && v.is_number_integer() && !l.names.empty() && l.names[0].is_string() &&
      v.get<long long>() >= 0 && v.get<long long>() < l.outputs()) {
    *id = v.get<int>();
  }
  if (*id < 0) {
    std::string known;
    for (int k = 0; k < l.outputs() && k < 8; ++k) known += (k ? ", " : "") + l.Name(k);
    BadLabel(c, r,
             fmt::format("{} is not one of the model's labels ({}{})", v.dump(), known,
                         l.outputs() > 8 ? ", ..." : ""),
             "fix the row, or train on a file that has this label");
  }
}

void WriteLabels(const Labels& l, json* config) {
  (*config)["problem_type"] = model::ProblemName(l.problem);
  if (l.problem == ProblemType::kRegression) return;
  json id2label = json::object(), label2id = json::object();
  for (int i = 0; i < l.outputs(); ++i) {
    id2label[std::to_string(i)] = l.names[i];
    label2id[l.Name(i)] = i;
  }
  (*config)["id2label"] = id2label;
  (*config)["label2id"] = label2id;
}

}  // namespace cputrain::task
