// The subcommands of `cputrain-numa`. Each Add*Command registers its CLI11 subcommand and the
// callback that runs it; callbacks throw cputrain::Error and main() maps it to the exit code
// (0 success, 2 usage/config/input error, 1 runtime failure).
#pragma once

#include <string>
#include <vector>

#include "config/config.h"

// CLI11 (header-only: ~8 s of compile per file that includes it) is declared here and included
// by the files that register or parse options.
namespace CLI {
class App;
class Validator;
}  // namespace CLI

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
// The check of every --seed (an unsigned 64-bit integer): decimal digits only, so that -1 is
// refused instead of wrapping to 2^64 - 1, and 010 is 10, as Python's int() reads it.
CLI::Validator SeedRange();

void AddTopoCommand(CLI::App& app);
void AddConfigCommand(CLI::App& app);
// command_line: how the user ran this process, shell-quoted, for the resume hint of a stopped run.
void AddTrainCommand(CLI::App& app, const std::string& command_line);
void AddGenerateCommand(CLI::App& app);
// eval --checkpoint X --data GLOB: validation loss of a checkpoint (eval_cmd.cc).
void AddEvalCommand(CLI::App& app);
void AddPlotCommand(CLI::App& app);
// export --format hf|llmc --checkpoint X -o OUT (export_cmd.cc).
void AddExportCommand(CLI::App& app);
// plan --model_name_or_path DIR [the task commands' flags]: the memory plan alone (plan_cmd.cc).
void AddPlanCommand(CLI::App& app);

// bench <suite> (the benchmark suites) and report RESULTS.json -o DIR (their charts and
// README.md). Declared here and defined in bench/bench_cli.cc (library cputrain_bench_cli) when
// the benchmarks are built (CPUTRAIN_BUILD_BENCH=ON), else in no_bench_cmd.cc, which says they
// were not built: src/ never includes bench/, bench/ plugs into the CLI at link time.
void AddBenchCommand(CLI::App& app);
void AddReportCommand(CLI::App& app);
// What both definitions share, so that --help reads the same either way (bench_cmd.cc).
inline constexpr const char* kBenchCommandHelp =
    "Benchmarks: `bench <suite> --help` for a suite's options; --json FILE writes its "
    "records, --quick makes a short smoke run; `bench all` runs every suite";
// Adds the `report` subcommand with its argument RESULTS and option -o/--output DIR.
CLI::App* AddReportOptions(CLI::App& app, std::string* results, std::string* dir);
// prepare-data: text files -> train.bin/val.bin token files (prepare_data_cmd.cc).
void AddPrepareDataCommand(CLI::App& app);
// tokenize --tokenizer PATH [--special]: lines on stdin -> ids on stdout (tokenize_cmd.cc).
void AddTokenizeCommand(CLI::App& app);
// The fine-tuning tasks (task/task.h): `qa`, `classify`, ... each with train, predict and
// evaluate run by one command core (task_command.h).
void AddTaskCommands(CLI::App& app, const std::string& command_line);

}  // namespace cputrain::cli
