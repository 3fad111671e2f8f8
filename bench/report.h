// The benchmark report behind `cputrain-numa report RESULTS.json -o DIR`: SVG charts and a
// README.md that embeds them with tables of the key numbers, from a BenchDocument (schema.h:
// the document of `bench all --json`, or one suite's list of records; docs/benchmarks.md lists
// the record fields). It lives in bench/ because it reads the bench schema; the charts
// themselves are drawn by the generic report/svg.h.
//
// Suites the report does not know are left out with a warning. A record missing a field a chart
// needs is an InputError naming the file. Every file is written atomically (common/files.h).
#pragma once

#include <string>
#include <vector>

#include "bench/schema.h"

namespace cputrain::bench {

// Writes DIR/README.md and the charts (DIR is created if needed); returns the files written, in
// order. `source` is the results file's name as the README should cite it. Throws InputError for
// a malformed record, or when no suite of the document is one the report can draw.
std::vector<std::string> WriteBenchReport(const BenchDocument& doc, const std::string& source,
                                          const std::string& dir);

}  // namespace cputrain::bench
