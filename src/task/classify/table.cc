// CSV, TSV and JSON Lines tables (table.h).
#include "task/classify/table.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <string_view>
#include <unordered_map>

#include "common/error.h"
#include "common/files.h"
#include "common/utf8.h"

namespace cputrain::task {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

constexpr std::uint64_t kMaxTableBytes = 4ull << 30;
// Why the limits (table.h) are these: a cell is tokenized whole before it is truncated to
// --max_seq_length (at most 65,536 tokens), so 1 MiB holds more than any run reads at 16 bytes a
// token; text classification files have a handful of columns, so 1024 leaves room for metadata
// and stops a header of 20 MB of commas (1.09 GB of empty names before this cap); 64 levels is
// what sft's rows may nest (chat/chat_template.cc), and the JSON is converted recursively.
constexpr const char* kLimitsHint = "docs/classification.md, \"Size limits\"";

[[noreturn]] void Bad(const std::string& path, std::size_t line, const std::string& what,
                      const std::string& hint) {
  throw InputError(fmt::format("{}, line {}: {}", path, line, what), hint);
}

// pandas.read_csv's default missing-value spellings (its na_values), read as missing; matched
// exactly (" NA" is text).
bool IsMissing(std::string_view cell) {
  static constexpr std::string_view kNa[] = {"",         "#N/A", "#N/A N/A", "#NA",    "-1.#IND",
                                             "-1.#QNAN", "-NaN", "-nan",     "1.#IND", "1.#QNAN",
                                             "<NA>",     "N/A",  "NA",       "NULL",   "NaN",
                                             "None",     "n/a",  "nan",      "null"};
  return std::find(std::begin(kNa), std::end(kNa), cell) != std::end(kNa);
}

// The ASCII white space pandas' C parser skips around a number.
std::string_view Trim(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\v\f\r";
  const std::size_t b = s.find_first_not_of(kSpace);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(kSpace) - b + 1);
}

std::size_t Digits(std::string_view s, std::size_t i) {
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
  return i;
}

// pandas' integer (its C parser's str_to_int64): white space, an optional sign, decimal digits.
bool ParseInt(std::string_view cell, long long* v) {
  const std::string_view s = Trim(cell);
  const std::size_t sign = !s.empty() && (s[0] == '-' || s[0] == '+') ? 1 : 0;
  if (sign == s.size() || Digits(s, sign) != s.size()) return false;
  const char* from = s.data() + (s[0] == '+' ? 1 : 0);
  const auto [end, ec] = std::from_chars(from, s.data() + s.size(), *v);
  return ec == std::errc() && end == s.data() + s.size();
}

// pandas' float (its C parser's precise_xstrtod, then parsers.pyx's infinity words): white
// space around [sign] digits [. digits] [e [sign] digits], with a digit before the exponent;
// or, exactly and in any case, inf, infinity with an optional sign. Out of range: +-inf or 0.
bool ParseNumber(std::string_view cell, double* v) {
  if (cell.size() <= 9) {  // "-infinity"
    std::string word(cell);
    for (char& c : word) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    for (const char* inf : {"inf", "+inf", "infinity", "+infinity", "-inf", "-infinity"}) {
      if (word == inf) {
        *v = word[0] == '-' ? -HUGE_VAL : HUGE_VAL;
        return true;
      }
    }
  }
  const std::string_view s = Trim(cell);
  std::size_t i = !s.empty() && (s[0] == '-' || s[0] == '+') ? 1 : 0;
  const std::size_t whole = Digits(s, i);
  std::size_t digits = whole - i;
  i = whole;
  if (i < s.size() && s[i] == '.') {
    const std::size_t frac = Digits(s, i + 1);
    digits += frac - i - 1;
    i = frac;
  }
  if (digits == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    const std::size_t sign = i + 1 < s.size() && (s[i + 1] == '-' || s[i + 1] == '+') ? 1 : 0;
    const std::size_t exp = Digits(s, i + 1 + sign);
    if (exp == i + 1 + sign) return false;
    i = exp;
  }
  if (i != s.size()) return false;
  const std::string text(s);  // strtod on a checked decimal: no hex, no nan, no locale words
  *v = std::strtod(text.c_str(), nullptr);
  return true;
}

[[noreturn]] void TooLong(const std::string& path, std::size_t line) {
  Bad(path, line, fmt::format("a field is longer than {} bytes", kMaxCellBytes),
      fmt::format("shorten it: a cell holds at most 1 MiB ({})", kLimitsHint));
}

// The fields of one record from `at` (CSV: RFC 4180 quoting; TSV: none), advancing past its end
// of line; *lines counts the line breaks read. At most `max_fields` are kept (the count goes on:
// the caller refuses the record), each at most kMaxCellBytes long.
struct Fields {
  std::vector<std::string> kept;
  std::size_t count = 1;
};
Fields Record(const std::string& t, std::size_t* at, char sep, bool quoting, std::size_t* lines,
              const std::string& path, std::size_t max_fields) {
  Fields f;
  f.kept.emplace_back();
  std::string spare;  // where the fields past max_fields go
  std::string* field = &f.kept.back();
  std::size_t i = *at;
  const std::size_t start_line = *lines;
  bool quoted = false;
  for (; i < t.size(); ++i) {
    const char c = t[i];
    if (field->size() > kMaxCellBytes) TooLong(path, start_line);
    if (quoted) {
      if (c == '"' && i + 1 < t.size() && t[i + 1] == '"') {
        *field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        *lines += c == '\n';
        *field += c;
      }
    } else if (quoting && c == '"' && field->empty()) {
      quoted = true;
    } else if (c == sep) {
      ++f.count;
      if (f.kept.size() < max_fields) {
        field = &f.kept.emplace_back();
      } else {
        spare.clear();
        field = &spare;
      }
    } else if (c == '\n' || c == '\r') {
      if (c == '\r' && i + 1 < t.size() && t[i + 1] == '\n') ++i;
      ++i;
      ++*lines;
      break;
    } else {
      *field += c;
    }
  }
  if (quoted) Bad(path, start_line, "a quoted field is not closed", "close the field's quote");
  if (field->size() > kMaxCellBytes) TooLong(path, start_line);
  *at = i;
  return f;
}

// The header's names as pandas' read_csv makes them (pandas/io/common.py, mangle_dupe_names): an
// empty name is "Unnamed: i"; a repeated one gets .1, .2, ... skipping a name the header already
// has (x, x, x.1 -> x, x.2, x.1), the named columns first, then the unnamed ones.
void PandasNames(std::vector<std::string>* names) {
  std::vector<std::size_t> order, unnamed;
  std::unordered_map<std::string, std::size_t> present;  // name -> columns now holding it
  for (std::size_t i = 0; i < names->size(); ++i) {
    std::string& n = (*names)[i];
    (n.empty() ? unnamed : order).push_back(i);
    if (n.empty()) n = fmt::format("Unnamed: {}", i);
    ++present[n];
  }
  order.insert(order.end(), unnamed.begin(), unnamed.end());
  std::unordered_map<std::string, std::size_t> counts;
  for (std::size_t i : order) {
    const std::string old = (*names)[i];
    std::string col = old;
    std::size_t cur = counts.count(col) ? counts[col] : 0;
    while (cur > 0) {
      counts[old] = cur + 1;
      col = fmt::format("{}.{}", old, cur);
      const auto p = present.find(col);
      if (p != present.end() && p->second > 0) {
        ++cur;
      } else {
        cur = counts.count(col) ? counts[col] : 0;
      }
    }
    --present[old];
    ++present[col];
    (*names)[i] = col;
    counts[col] = cur + 1;
  }
}

// Column c's cells typed as pandas types a column.
void TypeColumn(const std::vector<std::vector<std::string>>& cells, std::size_t c, Table* t) {
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

// A CSV or TSV file's cells, each column typed as pandas types it. A record takes at least a
// byte per field, so the table has fewer cells than the file has bytes.
void ReadDelimited(const std::string& text, char sep, Table* t) {
  const bool quoting = sep == ',';
  std::size_t at = text.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0, line = 1;
  std::vector<std::vector<std::string>> cells;
  Fields header = Record(text, &at, sep, quoting, &line, t->path, kMaxTableColumns);
  if (header.count > kMaxTableColumns) {
    Bad(t->path, 1,
        fmt::format("the header has {} columns, more than {}", header.count, kMaxTableColumns),
        fmt::format("a table has at most {} columns ({})", kMaxTableColumns, kLimitsHint));
  }
  t->columns = std::move(header.kept);
  if (t->columns.size() == 1 && t->columns[0].empty()) {
    Bad(t->path, 1, "no header row", "the first line names the columns (sentence,label)");
  }
  PandasNames(&t->columns);
  while (at < text.size()) {
    const std::size_t first = line;
    Fields r = Record(text, &at, sep, quoting, &line, t->path, t->columns.size());
    if (r.count == 1 && r.kept[0].empty()) continue;  // a blank line (pandas skips them)
    if (r.count != t->columns.size()) {
      Bad(t->path, first, fmt::format("{} fields, the header has {}", r.count, t->columns.size()),
          quoting ? "quote a field that holds a comma (\"a, b\")" : "a field holds a tab");
    }
    cells.push_back(std::move(r.kept));
    t->lines.push_back(first);
  }
  t->rows.assign(cells.size(), std::vector<json>(t->columns.size()));
  for (std::size_t c = 0; c < t->columns.size(); ++c) TypeColumn(cells, c, t);
}

// The first byte at which JSON text nests deeper than `limit` arrays and objects, or npos. A scan
// of the text, before it is parsed: the parsed value is converted recursively.
std::size_t TooDeepAt(std::string_view s, int limit) {
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::string_view::npos;
}

// A JSON value's type as pyarrow's reader unifies a column's: integers and fractions are one.
enum class Kind { kNone, kBool, kNumber, kString, kList, kObject };
Kind KindOf(const ordered_json& v) {
  if (v.is_boolean()) return Kind::kBool;
  if (v.is_number()) return Kind::kNumber;
  if (v.is_string()) return Kind::kString;
  if (v.is_array()) return Kind::kList;
  return v.is_object() ? Kind::kObject : Kind::kNone;
}
const char* KindName(Kind k) {
  constexpr const char* kNames[] = {"null",     "a boolean", "a number",
                                    "a string", "a list",    "an object"};
  return kNames[static_cast<int>(k)];
}

// The converted cell: as the parser made it, but an integer beyond int64 a fraction (pyarrow
// reads it as a double). Recursive: the row's depth was checked.
json ToCell(const ordered_json& v) {
  if (v.is_array()) {
    json a = json::array();
    for (const ordered_json& x : v) a.push_back(ToCell(x));
    return a;
  }
  if (v.is_object()) {
    json o = json::object();
    for (const auto& [k, x] : v.items()) o[k] = ToCell(x);
    return o;
  }
  if (v.is_number_unsigned() &&
      v.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<long long>::max())) {
    return json(v.get<double>());
  }
  return json(v);
}

// JSON Lines rows into a table: columns found through a hash map, each column's type checked
// as rows arrive, the cells bounded (table.h) before any row grows.
class JsonRows {
 public:
  JsonRows(Table* t, std::size_t bytes) : t_(t), cells_(std::max(bytes, kMinTableCells)) {}

  // One object's keys in the order the file writes them (datasets' columns: first seen first).
  void Add(const ordered_json& o, std::size_t line) {
    if (!o.is_object()) {
      Bad(t_->path, line, "not a JSON object",
          "one object per line: {\"sentence\": ..., \"label\": ...}");
    }
    std::vector<json> row;
    for (const auto& [key, value] : o.items()) {
      const std::size_t c = ColumnOf(key, line);
      Check(c, value, line);
      if (row.size() <= c) row.resize(c + 1);
      row[c] = ToCell(value);
    }
    if ((t_->rows.size() + 1) * t_->columns.size() > cells_) {
      Bad(t_->path, line,
          fmt::format("{} rows x {} columns are more cells than the table may hold ({}: one a "
                      "byte of the file): most rows lack most keys",
                      t_->rows.size() + 1, t_->columns.size(), cells_),
          fmt::format("give the rows the same keys ({})", kLimitsHint));
    }
    t_->rows.push_back(std::move(row));
    t_->lines.push_back(line);
  }

  void Finish() {
    for (auto& r : t_->rows) r.resize(t_->columns.size());
  }

 private:
  std::size_t ColumnOf(const std::string& key, std::size_t line) {
    const auto it = index_.find(key);
    if (it != index_.end()) return it->second;
    if (t_->columns.size() == kMaxTableColumns) {
      Bad(t_->path, line, fmt::format("the rows have more than {} keys", kMaxTableColumns),
          fmt::format("a table has at most {} columns ({})", kMaxTableColumns, kLimitsHint));
    }
    if (key.size() > kMaxCellBytes) {
      Bad(t_->path, line, fmt::format("a key is longer than {} bytes", kMaxCellBytes),
          fmt::format("shorten it ({})", kLimitsHint));
    }
    t_->columns.push_back(key);
    kinds_.push_back({});
    return index_[key] = t_->columns.size() - 1;
  }

  // Column c's value on `line` against the type its earlier rows gave it (and its lists' items'),
  // as datasets' pyarrow reader refuses a column that changes type.
  void Check(std::size_t c, const ordered_json& v, std::size_t line) {
    if (v.is_string() && v.get_ref<const std::string&>().size() > kMaxCellBytes) {
      Bad(t_->path, line,
          fmt::format("'{}' is longer than {} bytes", t_->columns[c], kMaxCellBytes),
          fmt::format("shorten it: a cell holds at most 1 MiB ({})", kLimitsHint));
    }
    Seen& s = kinds_[c];
    Unify(c, KindOf(v), line, &s.kind, &s.line, "holds");
    if (!v.is_array()) return;
    for (const ordered_json& x : v) Unify(c, KindOf(x), line, &s.item, &s.item_line, "lists");
  }
  void Unify(std::size_t c, Kind k, std::size_t line, Kind* seen, std::size_t* seen_line,
             const char* verb) {
    if (k == Kind::kNone) return;
    if (*seen == Kind::kNone) {
      *seen = k;
      *seen_line = line;
      return;
    }
    if (*seen == k) return;
    Bad(t_->path, line,
        fmt::format("column '{}' {} {} where line {} {} {}: datasets refuses a column of mixed "
                    "types",
                    t_->columns[c], verb, KindName(k), *seen_line, verb, KindName(*seen)),
        "write the column's values as one JSON type (1 or \"1\", not both)");
  }

  struct Seen {
    Kind kind = Kind::kNone, item = Kind::kNone;
    std::size_t line = 0, item_line = 0;
  };
  Table* t_;
  std::size_t cells_;
  std::unordered_map<std::string, std::size_t> index_;
  std::vector<Seen> kinds_;
};

// Line of byte `at` of text, from 1.
std::size_t LineOf(const std::string& text, std::size_t at) {
  return 1 + static_cast<std::size_t>(std::count(text.begin(), text.begin() + at, '\n'));
}

void ReadJson(const std::string& text, Table* t) {
  JsonRows rows(t, text.size());
  const std::string too_deep = fmt::format("the row nests deeper than {} levels", kMaxRowDepth);
  const char* flatten = "a row holds texts and a label: flatten the deeper data";
  const std::size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '[') {  // one JSON list of objects
    const std::size_t deep = TooDeepAt(text, kMaxRowDepth + 1);
    if (deep != std::string::npos) Bad(t->path, LineOf(text, deep), too_deep, flatten);
    const auto all = ordered_json::parse(text, nullptr, false);
    if (all.is_discarded() || !all.is_array()) {
      Bad(t->path, 1, "not JSON", "write one JSON object per line (JSON Lines), or a JSON list");
    }
    for (const auto& o : all) rows.Add(o, 1);
    return rows.Finish();
  }
  std::size_t at = 0, line = 0;
  while (at < text.size()) {
    std::size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    ++line;
    const std::string_view l(text.data() + at, end - at);
    at = end + 1;
    if (l.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    if (TooDeepAt(l, kMaxRowDepth) != std::string_view::npos) Bad(t->path, line, too_deep, flatten);
    const auto o = ordered_json::parse(l, nullptr, false);
    if (o.is_discarded()) {
      Bad(t->path, line, "not JSON", "write one JSON object per line (JSON Lines)");
    }
    rows.Add(o, line);
  }
  rows.Finish();
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
