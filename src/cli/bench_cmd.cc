// `cputrain-numa bench <suite>`: the benchmark suites of bench/ (bench/bench.h), each a
// subcommand with the shared options --config/--set/--topology (CommonOptions), --json FILE and
// --quick, plus its own.
#include <memory>

#include "cli/commands.h"
#include "common/error.h"

#if defined(CPUTRAIN_HAVE_BENCH)
#include "bench/bench.h"
#include "common/log.h"
#endif

namespace cputrain::cli {

void AddBenchCommand(CLI::App& app) {
  CLI::App* bench = app.add_subcommand(
      "bench",
      "Benchmarks: `bench <suite> --help` for a suite's options; --json FILE writes its "
      "records, --quick makes a short smoke run");
  bench->require_subcommand(1);
#if defined(CPUTRAIN_HAVE_BENCH)
  struct Entry {
    std::unique_ptr<bench::Suite> suite;
    CommonOptions common;
    bool quick = false;
    std::string json;
  };
  for (std::unique_ptr<bench::Suite>& suite : bench::MakeSuites()) {
    auto e = std::make_shared<Entry>();
    e->suite = std::move(suite);
    CLI::App* cmd = bench->add_subcommand(e->suite->name(), e->suite->description());
    e->common.AddTo(cmd);
    cmd->add_option("--json", e->json, "write the records as one JSON list to this file");
    cmd->add_flag("--quick", e->quick, "small sizes and few repetitions (CI smoke run)");
    e->suite->AddOptions(cmd);
    cmd->callback([e] {
      bench::BenchContext ctx;
      ctx.config = e->common.Load();
      ctx.quick = e->quick;
      ctx.json_path = e->json;
      bench::Report report;
      e->suite->Run(ctx, &report);
      if (!e->json.empty()) {
        report.WriteJson(e->json);
        log::Info("bench {}: {} records written to {}", e->suite->name(), report.records().size(),
                  e->json);
      }
    });
  }
#else
  bench->callback([] {
    throw InputError("this cputrain-numa was built without the benchmarks",
                     "reconfigure with -DCPUTRAIN_BUILD_BENCH=ON");
  });
#endif
}

}  // namespace cputrain::cli
