// Fuzz target: the classification task's table reader (task::ParseTable,
// src/task/classify/table.h: CSV as pandas reads it, TSV, JSON Lines). The first byte picks the
// format, the rest is the text (checked as UTF-8 first, as ReadTable does). A table it accepts
// must be rectangular — every row as many cells as the header has columns — with a line per
// row that never goes back, and every cell null, a bool, a number, a string or (JSON) a list or
// object; Column must find every column by its name, and the names must differ (pandas renames
// a repeated one); the table keeps to its caps (table.h): at most kMaxTableColumns columns and
// one cell per byte of the text, or kMinTableCells.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <unordered_set>

#include "common/error.h"
#include "common/utf8.h"
#include "task/classify/table.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using cputrain::task::TableFormat;
  if (size == 0) return 0;
  const TableFormat format = data[0] % 3 == 0   ? TableFormat::kCsv
                             : data[0] % 3 == 1 ? TableFormat::kTsv
                                                : TableFormat::kJsonLines;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    cputrain::CheckUtf8(text, "the input", cputrain::kUtf8Hint);
    const cputrain::task::Table t = cputrain::task::ParseTable(text, "fuzz", format);
    if (t.rows.empty() || t.lines.size() != t.rows.size()) std::abort();
    for (std::size_t i = 0; i < t.rows.size(); ++i) {
      if (t.rows[i].size() != t.columns.size()) std::abort();
      if (i > 0 && t.lines[i] < t.lines[i - 1]) std::abort();
    }
    for (const std::string& c : t.columns) {
      if (t.rows[0].size() <= t.Column(c, "--flag")) std::abort();
    }
    using cputrain::task::kMaxTableColumns;
    using cputrain::task::kMinTableCells;
    const std::unordered_set<std::string> names(t.columns.begin(), t.columns.end());
    if (names.size() != t.columns.size() || t.columns.size() > kMaxTableColumns) std::abort();
    if (t.rows.size() * t.columns.size() > std::max(text.size(), kMinTableCells)) std::abort();
  } catch (const cputrain::InputError&) {
  }
  return 0;
}
