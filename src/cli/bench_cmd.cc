// The command-line surface of `bench` and `report` that does not depend on bench/: the `report`
// subcommand's arguments, shared by bench/bench_cli.cc and no_bench_cmd.cc (commands.h says why
// the commands themselves are defined in bench/).
#include <CLI/CLI.hpp>

#include "cli/commands.h"

namespace cputrain::cli {

CLI::App* AddReportOptions(CLI::App& app, std::string* results, std::string* dir) {
  CLI::App* cmd = app.add_subcommand(
      "report",
      "Draw benchmark results (bench all --json, or one suite's --json) as SVG charts "
      "and a README.md in a directory");
  cmd->add_option("results", *results, "JSON written by `cputrain-numa bench ... --json`")
      ->required();
  cmd->add_option("-o,--output", *dir, "directory to write (created if needed)");
  return cmd;
}

}  // namespace cputrain::cli
