// bench/: the suites behind `cputrain-numa bench <suite>`: memory, gemm, collectives, train, and
// `bench all` that runs them in one go (docs/benchmarks.md describes each one's method). A suite
// is a class registered in one list (suites.cc); the CLI (src/cli/bench_cmd.cc) gives every suite
// the same shared options and the same output conventions:
//
//   --config FILE, --set k=v, --topology SPEC   the run's config, as every command loads it
//   --json FILE                                 the suite's records, one JSON list, to FILE
//   --quick                                     small sizes, few repetitions: a CI smoke run
//
// Output: the human table on stdout, diagnostics on stderr (common/log.h), records through
// SuiteRecords (schema.h: each record carries "suite", so a list of records says what it is).
// Timings are medians of repetitions after warm-up unless a suite says otherwise;
// benchmarks are never asserted by tests (numbers on shared CI machines are too noisy), CI only
// runs `--quick` to see that each suite still works.
//
// Adding a suite: derive from Suite in bench/<name>_bench.cc, add its factory to MakeSuites()
// in suites.cc and the file to bench/CMakeLists.txt.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/schema.h"
#include "bench/stats.h"
#include "config/config.h"

// CLI11 (header-only: ~8 s of compile per file that includes it) is declared here and included
// by the suites that add options.
namespace CLI {
class App;
}  // namespace CLI

namespace cputrain::bench {

// What every suite gets from the shared options.
struct BenchContext {
  Config config;          // --config + --set + --topology, loaded and validated
  bool quick = false;     // --quick
  std::string json_path;  // --json ("" = no file)
};

class Suite {
 public:
  virtual ~Suite() = default;
  virtual std::string name() const = 0;         // the subcommand: `bench <name>`
  virtual std::string description() const = 0;  // one line for --help
  // Suite-specific options, bound to the suite's members (parsed before Run).
  virtual void AddOptions(CLI::App* cmd) { (void)cmd; }
  // Runs the benchmark, prints its table on stdout, adds its records. Throws InputError for a
  // bad option combination, RuntimeError when a measurement cannot be made.
  virtual void Run(const BenchContext& ctx, SuiteRecords* report) = 0;
};

// Every suite, in `bench --help` order (suites.cc).
std::vector<std::unique_ptr<Suite>> MakeSuites();

// ---- helpers shared by suites

// "4 KiB", "256 MiB", "1.5 GiB".
std::string FormatBytes(uint64_t bytes);
// "12.3 us", "4.56 ms", "1.23 s".
std::string FormatSeconds(double seconds);
// Seconds on the steady clock (CLOCK_MONOTONIC: comparable between the threads and the
// processes of one machine).
double NowSeconds();

// A page-aligned anonymous mapping, huge-page advised (first touch of 4 KiB pages costs ~2.4 µs
// each in our VMs, docs/machine-notes.md), unmapped on destruction. Memory is not touched here: the
// owner touches it from the threads that will use it, so that first-touch places it on their node.
class MappedBuffer {
 public:
  MappedBuffer() = default;
  explicit MappedBuffer(std::size_t bytes);  // throws RuntimeError if mmap fails
  ~MappedBuffer();
  MappedBuffer(MappedBuffer&& other) noexcept;
  MappedBuffer& operator=(MappedBuffer&& other) noexcept;
  MappedBuffer(const MappedBuffer&) = delete;
  MappedBuffer& operator=(const MappedBuffer&) = delete;

  float* floats() const { return static_cast<float*>(data_); }
  std::size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

// How much of the machine OTHER processes used over an interval: (CPU time of the whole machine
// from /proc/stat - this process's and its waited-for children's, from getrusage) / (wall time x
// CPUs), in percent. On a shared box this is what says whether a measurement was disturbed; the
// load average cannot, since it counts the benchmark's own threads. Starts at construction.
class OthersMeter {
 public:
  OthersMeter();
  double Percent() const;

 private:
  double wall0_, machine0_, ours0_;
};

// A fresh directory under $TMPDIR (or /tmp), removed with its contents on destruction. Throws
// RuntimeError if it cannot be created.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& prefix);
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// What a report needs to say which machine produced the numbers (schema.h's Machine), the
// topology left empty: the caller adds it (topo::TopologyToJson).
Machine MachineInfo();
// This process's command line, as one shell-quoted string (from /proc/self/cmdline).
std::string CommandLine();

}  // namespace cputrain::bench
