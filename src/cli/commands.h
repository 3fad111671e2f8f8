// The subcommands of `cputrain-numa`. Each Add*Command registers its CLI11 subcommand and the
// callback that runs it; callbacks throw cputrain::Error and main() maps it to the exit code
// (0 success, 2 usage/config/input error, 1 runtime failure).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "config/config.h"

namespace cputrain::cli {

// The options every machine-facing command shares: --config, --set, --topology.
struct CommonOptions {
  std::string config_path;
  std::vector<std::string> sets;
  std::string topology;  // "" = from the config

  void AddTo(CLI::App* cmd);
  // Loads the config, applies --set and --topology.
  Config Load() const;
};

// Checks for numeric flags: the value must parse as a finite number (nan and inf are refused,
// which CLI11's Range lets through) in [lo, hi], and the message prints the real bound
// ("in [0, 100]", ">= 1"), not CLI11's "0 to 1.797e308".
CLI::Validator FiniteRange(double lo, double hi);
CLI::Validator AtLeast(double lo);

void AddTopoCommand(CLI::App& app);
void AddConfigCommand(CLI::App& app);
// bench <suite>: the benchmark suites of bench/ (bench_cmd.cc).
void AddBenchCommand(CLI::App& app);
void AddTrainCommand(CLI::App& app);
void AddGenerateCommand(CLI::App& app);
void AddPlotCommand(CLI::App& app);
// report RESULTS.json -o DIR: benchmark charts and README.md (report_cmd.cc).
void AddReportCommand(CLI::App& app);
// prepare-data: text files -> train.bin/val.bin token files (prepare_data_cmd.cc).
void AddPrepareDataCommand(CLI::App& app);

}  // namespace cputrain::cli
