// `bench` and `report` in a cputrain-numa built without the benchmarks (CPUTRAIN_BUILD_BENCH=OFF):
// the subcommands exist, with the same help, and say how to get them. The real ones are in
// bench/bench_cli.cc; the report is there too because it reads the bench record schema.
#include <CLI/CLI.hpp>
#include <memory>

#include "cli/commands.h"
#include "common/error.h"

namespace cputrain::cli {
namespace {

[[noreturn]] void NotBuilt(const char* what) {
  throw InputError(std::string("this cputrain-numa was built without the benchmarks") + what,
                   "reconfigure with -DCPUTRAIN_BUILD_BENCH=ON");
}

}  // namespace

void AddBenchCommand(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", kBenchCommandHelp);
  bench->require_subcommand(1);
  bench->callback([] { NotBuilt(""); });
}

void AddReportCommand(CLI::App& app) {
  auto paths = std::make_shared<std::pair<std::string, std::string>>("", "bench-report");
  AddReportOptions(app, &paths->first, &paths->second)->callback([paths] {
    NotBuilt(" (the report reads their results' schema)");
  });
}

}  // namespace cputrain::cli
