// `cputrain-numa report RESULTS.json -o DIR`: SVG charts and DIR/README.md from benchmark results
// (the document of `bench all --json`, or one suite's list of records); see report/bench_report.h.
#include <memory>

#include "cli/commands.h"
#include "report/bench_report.h"

namespace cputrain::cli {

void AddReportCommand(CLI::App& app) {
  struct Opts {
    std::string results, dir = "bench-report";
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "report",
      "Draw benchmark results (bench all --json, or one suite's --json) as SVG charts "
      "and a README.md in a directory");
  cmd->add_option("results", o->results, "JSON written by `cputrain-numa bench ... --json`")
      ->required();
  cmd->add_option("-o,--output", o->dir, "directory to write (created if needed)");
  cmd->callback([o] {
    const report::BenchResults results = report::LoadBenchResults(o->results);
    const std::vector<std::string> files = report::WriteBenchReport(results, o->results, o->dir);
    for (const std::string& f : files) std::printf("wrote %s\n", f.c_str());
  });
}

}  // namespace cputrain::cli
