// The data files of text classification, as run_glue.py and run_classification.py load them
// through Hugging Face datasets (docs/classification.md, "The files"): a table of named columns.
//   - CSV (.csv): pandas.read_csv's defaults — a header row, comma-separated fields, "double
//     quotes" around a field that holds commas, quotes ("") or line breaks; a UTF-8 byte-order
//     mark dropped; duplicate names renamed as pandas renames them (sentence, sentence.1), an
//     empty one "Unnamed: i"; pandas' missing-value spellings ("", "NA", "N/A", "NaN", "null",
//     "None", ...) read as missing; each column typed as pandas' C parser types it: integers if
//     every present cell is one (ASCII white space around an optional sign and decimal digits:
//     " 1" is 1, 0x10 is text), else numbers if every present cell is one (decimal, with an
//     exponent; inf, +infinity, -Infinity in any case; NAN, 0x1p1 and 1_000 are text), else
//     text. One deviation: an integer beyond int64 reads as a number (pandas: uint64 or
//     Python ints);
//   - TSV (.tsv): the same with tabs and no quoting (GLUE's original files, csv.QUOTE_NONE);
//   - JSON Lines (.json, .jsonl): one object per line (a file holding one JSON list of objects is
//     read too); the columns are the keys in the order they first appear, a missing key missing;
//     each column typed as datasets' pyarrow reader types it: one JSON type a column (integers
//     and fractions are numbers; an integer beyond int64 a fraction, as pyarrow's double), the
//     items of its lists one type too; a column that mixes them (1 and "1") is refused, as
//     datasets refuses it.
// Every file is read whole (at most 4 GiB), checked as strict UTF-8 first (common/utf8.h), and
// every row must have the header's fields: an InputError names the file, the line and the fix.
// Size limits, each checked before what it bounds is allocated (docs/classification.md, "Size
// limits"): kMaxTableColumns columns, kMaxCellBytes a cell (and a key), rows nesting at most
// kMaxRowDepth levels, and a table of at most one cell (rows x columns) per byte of the file, or
// kMinTableCells — a JSON Lines file whose rows each bring new keys would otherwise grow
// quadratically in memory.
//
// Thread safety: ReadTable may be called from any thread.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace cputrain::task {

inline constexpr std::size_t kMaxTableColumns = 1024;
inline constexpr std::size_t kMaxCellBytes = std::size_t{1} << 20;
inline constexpr int kMaxRowDepth = 64;
inline constexpr std::size_t kMinTableCells = std::size_t{1} << 20;

struct Table {
  std::string path;
  std::vector<std::string> columns;
  // rows[i][c]: null (missing), an integer, a number, a string, a bool, or (JSON) a list.
  std::vector<std::vector<nlohmann::json>> rows;
  std::vector<std::size_t> lines;  // the line each row starts on, from 1 (messages)
  // The column's index; InputError naming `flag` and the columns there are when it has none.
  std::size_t Column(const std::string& name, const std::string& flag) const;
};

// flag: the option that named the file (--train_file), for messages. The format is the file's
// extension's.
Table ReadTable(const std::string& path, const std::string& flag);

// The same for text already read and checked as UTF-8 (tests/fuzz/fuzz_classify_table.cc):
// path names it in messages.
enum class TableFormat { kCsv, kTsv, kJsonLines };
Table ParseTable(const std::string& text, const std::string& path, TableFormat format);

}  // namespace cputrain::task
