// The benchmark report behind `cputrain-numa report RESULTS.json -o DIR`: SVG charts and a
// README.md that embeds them with tables of the key numbers, from what `cputrain-numa bench`
// wrote (docs/benchmarks.md lists the record fields).
//
// Accepted input:
//   - the document of `bench all --json`: {"machine": {...}, "command": "...", "suites":
//     {"memory": [...], "gemm": [...], "collectives": [...], "train": [...], "mpi-sync": [...]}};
//   - one suite's list of records (`bench <suite> --json`); the suite is read from the records'
//     "suite" field, or inferred from their fields (busbw_gbs: collectives; tokens_per_s: train;
//     product or scope: gemm; ns_per_load or cpu_node: memory; method and algbw_gbs: mpi-sync).
// Anything else (not JSON, another shape, records of no known suite, a record missing a field a
// chart needs) is an InputError naming the file and the problem. Every file is written
// atomically (common/files.h).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace cputrain::report {

struct BenchResults {
  nlohmann::json machine;  // {} for a single suite's list
  std::string command;     // "" when the file does not say
  bool quick = false;
  nlohmann::json runs = nlohmann::json::object();  // suite -> {seconds, load_start, load_end}
  // suite name -> its records (a JSON list), for the suites present.
  nlohmann::json suites = nlohmann::json::object();
};

// Reads and classifies `path`. Throws InputError (missing or unreadable file, not JSON, unknown
// shape).
BenchResults LoadBenchResults(const std::string& path);

// Writes DIR/README.md and the charts (DIR is created if needed); returns the files written, in
// order. `source` is the results file's name as the README should cite it. Throws InputError for
// a malformed record.
std::vector<std::string> WriteBenchReport(const BenchResults& results, const std::string& source,
                                          const std::string& dir);

}  // namespace cputrain::report
