// The bench record schema: what `cputrain-numa bench` writes and `cputrain-numa report` reads.
// One set of types for both sides, so the writer and the reader cannot drift apart; the JSON
// layout is documented in docs/benchmarks.md ("The results file").
//
//   bench <suite> --json FILE   one suite's records: a JSON list of SuiteRecords' records
//   bench all --json FILE       a BenchDocument: {"machine": Machine, "command", "quick",
//                               "suites": {suite: [records]}, "runs": {suite: RunStats},
//                               "errors": {suite: message}}
//
// A record is a JSON object with "suite" (its suite's name, set by SuiteRecords::Add) and the
// suite's own fields (docs/benchmarks.md lists them per suite). The suite of a record is only
// ever read from "suite" or from the key of "suites": never guessed from its other fields.
#pragma once

#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace cputrain::bench {

inline constexpr double kUnknown = std::numeric_limits<double>::quiet_NaN();

// The machine a document was measured on (bench.cc's MachineInfo fills it).
struct Machine {
  std::string cpu_model;                       // /proc/cpuinfo "model name"
  int cpu_family = -1, cpu_model_number = -1;  // /proc/cpuinfo "cpu family", "model" (-1: unknown)
  std::string isa;                   // the vector extensions the kernels care about, as flags
  std::string date;                  // UTC, ISO 8601
  std::string hostname, kernel;      // uname
  int logical_cpus = 0;              // online CPUs
  std::string openblas;              // its build configuration and core name
  std::vector<double> load_average;  // 1, 5, 15 minutes at the start (empty if unknown)
  nlohmann::json topology = nlohmann::json::object();  // topo::TopologyToJson, {} if unknown

  nlohmann::json ToJson() const;
  static Machine FromJson(const nlohmann::json& j);  // missing fields stay empty / 0
  // One line naming the CPU for the figures printed beside it: "AMD EPYC (family 26 model 2;
  // avx2 fma avx512f ... avx512_bf16), 2 logical CPUs; OpenBLAS 0.3.21 ... (core Haswell); <date>".
  std::string Describe() const;
};

// How one suite's run went inside `bench all`.
struct RunStats {
  // NaN = not in the file. load_*: the 1-minute load average, ours included (-1 if getloadavg
  // failed); others_cpu_pct: the CPU share other processes took (OthersMeter).
  double seconds = kUnknown, load_start = kUnknown, load_end = kUnknown;
  double others_cpu_pct = kUnknown;

  nlohmann::json ToJson() const;
  static RunStats FromJson(const nlohmann::json& j);
};

// One suite's records, in the order the suite produced them.
class SuiteRecords {
 public:
  explicit SuiteRecords(std::string suite) : suite_(std::move(suite)) {}
  const std::string& suite() const { return suite_; }
  // Appends the record (a JSON object), with "suite" set to this suite's name.
  void Add(nlohmann::json record);
  const nlohmann::json& records() const { return records_; }  // a JSON list
  // Writes the records as one JSON list (`bench <suite> --json`). Throws RuntimeError naming the
  // file if it cannot.
  void WriteJson(const std::string& path) const;

 private:
  std::string suite_;
  nlohmann::json records_ = nlohmann::json::array();
};

// A whole results file. A single suite's list reads as a document with no machine.
struct BenchDocument {
  std::optional<Machine> machine;  // absent for one suite's list
  std::string command;             // "" when the file does not say
  bool quick = false;
  std::vector<SuiteRecords> suites;           // in the order they ran
  std::map<std::string, RunStats> runs;       // suite -> its run, for `bench all`
  std::map<std::string, std::string> errors;  // suite -> why it failed

  // The records of `suite`, or nullptr when the document has none.
  const SuiteRecords* Find(const std::string& suite) const;
  nlohmann::json ToJson() const;
  // Reads either shape from `text`. Throws InputError naming `path`: not JSON, another shape, a
  // record with no "suite" or one that disagrees with its list, no records at all.
  static BenchDocument Parse(const std::string& text, const std::string& path);
  // ReadFile(path) + Parse (InputError if unreadable).
  static BenchDocument Load(const std::string& path);
};

}  // namespace cputrain::bench
