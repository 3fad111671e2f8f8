// CSV, TSV and JSON Lines tables (table.h).
#include "task/classify/table.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string_view>

#include "common/error.h"
#include "common/files.h"
#include "common/utf8.h"

namespace cputrain::task {
namespace {

using nlohmann::json;

constexpr std::uint64_t kMaxTableBytes = 4ull << 30;

[[noreturn]] void Bad(const std::string& path, std::size_t line, const std::string& what,
                      const std::string& hint) {
  throw InputError(fmt::format("{}, line {}: {}", path, line, what), hint);
}

// pandas.read_csv's default missing-value spellings (its na_values), read as missing.
bool IsMissing(std::string_view cell) {
  static constexpr std::string_view kNa[] = {"",         "#N/A", "#N/A N/A", "#NA",    "-1.#IND",
                                             "-1.#QNAN", "-NaN", "-nan",     "1.#IND", "1.#QNAN",
                                             "<NA>",     "N/A",  "NA",       "NULL",   "NaN",
                                             "None",     "n/a",  "nan",      "null"};
  return std::find(std::begin(kNa), std::end(kNa), cell) != std::end(kNa);
}

bool ParseInt(const std::string& s, long long* v) {
  if (s.empty()) return false;
  std::size_t i = s[0] == '-' || s[0] == '+' ? 1 : 0;
  if (i == s.size()) return false;
  for (std::size_t k = i; k < s.size(); ++k)
    if (s[k] < '0' || s[k] > '9') return false;
  errno = 0;
  *v = std::strtoll(s.c_str(), nullptr, 10);
  return errno == 0;
}

bool ParseNumber(const std::string& s, double* v) {
  if (s.empty() || std::isspace(static_cast<unsigned char>(s[0]))) return false;
  char* end = nullptr;
  *v = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

// The fields of one record from `at` (CSV: RFC 4180 quoting; TSV: none), advancing past its end
// of line; *lines counts the line breaks read.
std::vector<std::string> Record(const std::string& t, std::size_t* at, char sep, bool quoting,
                                std::size_t* lines, const std::string& path) {
  std::vector<std::string> fields(1);
  std::size_t i = *at;
  const std::size_t start_line = *lines;
  bool quoted = false;
  for (; i < t.size(); ++i) {
    const char c = t[i];
    if (quoted) {
      if (c == '"' && i + 1 < t.size() && t[i + 1] == '"') {
        fields.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        *lines += c == '\n';
        fields.back() += c;
      }
    } else if (quoting && c == '"' && fields.back().empty()) {
      quoted = true;
    } else if (c == sep) {
      fields.emplace_back();
    } else if (c == '\n' || c == '\r') {
      if (c == '\r' && i + 1 < t.size() && t[i + 1] == '\n') ++i;
      ++i;
      ++*lines;
      break;
    } else {
      fields.back() += c;
    }
  }
  if (quoted) Bad(path, start_line, "a quoted field is not closed", "close the field's quote");
  *at = i;
  return fields;
}

// A CSV or TSV file's cells, each column typed as pandas types it.
void ReadDelimited(const std::string& text, char sep, Table* t) {
  const bool quoting = sep == ',';
  std::size_t at = text.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0, line = 1;
  std::vector<std::vector<std::string>> cells;
  t->columns = Record(text, &at, sep, quoting, &line, t->path);
  if (t->columns.size() == 1 && t->columns[0].empty()) {
    Bad(t->path, 1, "no header row", "the first line names the columns (sentence,label)");
  }
  while (at < text.size()) {
    const std::size_t first = line;
    std::vector<std::string> r = Record(text, &at, sep, quoting, &line, t->path);
    if (r.size() == 1 && r[0].empty()) continue;  // a blank line (pandas skips them)
    if (r.size() != t->columns.size()) {
      Bad(t->path, first, fmt::format("{} fields, the header has {}", r.size(), t->columns.size()),
          quoting ? "quote a field that holds a comma (\"a, b\")" : "a field holds a tab");
    }
    cells.push_back(std::move(r));
    t->lines.push_back(first);
  }
  t->rows.assign(cells.size(), std::vector<json>(t->columns.size()));
  for (std::size_t c = 0; c < t->columns.size(); ++c) {
    bool ints = true, numbers = true;
    long long iv = 0;
    double dv = 0;
    for (const auto& r : cells) {
      if (IsMissing(r[c])) continue;
      ints = ints && ParseInt(r[c], &iv);
      numbers = numbers && ParseNumber(r[c], &dv);
    }
    for (std::size_t i = 0; i < cells.size(); ++i) {
      const std::string& s = cells[i][c];
      json& v = t->rows[i][c];
      if (IsMissing(s)) continue;  // null
      if (ints && ParseInt(s, &iv)) {
        v = iv;
      } else if (numbers && ParseNumber(s, &dv)) {
        v = dv;
      } else {
        v = s;
      }
    }
  }
}

std::size_t ColumnOf(Table* t, const std::string& key) {
  const auto it = std::find(t->columns.begin(), t->columns.end(), key);
  if (it != t->columns.end()) return static_cast<std::size_t>(it - t->columns.begin());
  t->columns.push_back(key);
  for (auto& r : t->rows) r.emplace_back();
  return t->columns.size() - 1;
}

// One object's keys in the order the file writes them (datasets' columns: first seen first).
void AddObject(const nlohmann::ordered_json& o, std::size_t line, Table* t) {
  if (!o.is_object()) {
    Bad(t->path, line, "not a JSON object",
        "one object per line: {\"sentence\": ..., \"label\": ...}");
  }
  std::vector<json> row(t->columns.size());
  for (const auto& [key, value] : o.items()) {
    const std::size_t c = ColumnOf(t, key);
    row.resize(t->columns.size());
    row[c] = json(value);
  }
  row.resize(t->columns.size());
  t->rows.push_back(std::move(row));
  t->lines.push_back(line);
}

void ReadJson(const std::string& text, Table* t) {
  const std::size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '[') {  // one JSON list of objects
    const auto all = nlohmann::ordered_json::parse(text, nullptr, false);
    if (all.is_discarded() || !all.is_array()) {
      Bad(t->path, 1, "not JSON", "write one JSON object per line (JSON Lines), or a JSON list");
    }
    for (const auto& o : all) AddObject(o, 1, t);
    return;
  }
  std::size_t at = 0, line = 0;
  while (at < text.size()) {
    std::size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    ++line;
    const std::string_view l(text.data() + at, end - at);
    at = end + 1;
    if (l.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const auto o = nlohmann::ordered_json::parse(l, nullptr, false);
    if (o.is_discarded()) {
      Bad(t->path, line, "not JSON", "write one JSON object per line (JSON Lines)");
    }
    AddObject(o, line, t);
  }
  for (auto& r : t->rows) r.resize(t->columns.size());
}

}  // namespace

std::size_t Table::Column(const std::string& name, const std::string& flag) const {
  const auto it = std::find(columns.begin(), columns.end(), name);
  if (it != columns.end()) return static_cast<std::size_t>(it - columns.begin());
  std::string have;
  for (const std::string& c : columns) have += (have.empty() ? "" : ", ") + c;
  throw InputError(fmt::format("{} has no column '{}': its columns are {}", path, name, have),
                   fmt::format("name one of them with {}", flag));
}

Table ReadTable(const std::string& path, const std::string& flag) {
  const std::string ext = std::filesystem::path(path).extension().string();
  if (ext != ".csv" && ext != ".tsv" && ext != ".json" && ext != ".jsonl") {
    throw InputError(fmt::format("{} '{}' is not a .csv, .tsv, .json or .jsonl file", flag, path),
                     "run_glue.py reads CSV or JSON Lines: name the file by what it holds");
  }
  // Strict UTF-8 (common/utf8.h), as every text input.
  const std::string text = ReadUtf8File(
      path, InputKind{"data file", "a CSV or JSON Lines file", kMaxTableBytes, "check " + flag});
  const TableFormat format = ext == ".csv"   ? TableFormat::kCsv
                             : ext == ".tsv" ? TableFormat::kTsv
                                             : TableFormat::kJsonLines;
  try {
    return ParseTable(text, path, format);
  } catch (const InputError& e) {
    if (std::string(e.what()).find("has no rows") == std::string::npos) throw;
    throw InputError(fmt::format("{} {}", flag, e.what()), e.hint());
  }
}

Table ParseTable(const std::string& text, const std::string& path, TableFormat format) {
  Table t;
  t.path = path;
  if (format == TableFormat::kJsonLines) {
    ReadJson(text, &t);
  } else {
    ReadDelimited(text, format == TableFormat::kCsv ? ',' : '\t', &t);
  }
  if (t.rows.empty()) {
    throw InputError(fmt::format("'{}' has no rows", path),
                     "pass a file with a header and at least one example");
  }
  return t;
}

}  // namespace cputrain::task
