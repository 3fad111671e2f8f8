// `cputrain-numa bench <suite>`: the benchmark suites of bench/ (bench/bench.h), each a
// subcommand with the shared options --config/--set/--topology (CommonOptions), --json FILE and
// --quick, plus its own; and `bench all`, which runs every suite in one process and writes one
// JSON report (docs/benchmarks.md):
//   {"machine": {cpu_model, date, hostname, kernel, openblas, topology, ...}, "command": "...",
//    "quick": bool, "suites": {"memory": [...], "gemm": [...], "collectives": [...],
//    "train": [...]}, "runs": {suite: {seconds, load_start, load_end, others_cpu_pct}},
//    "errors": {suite: message}}
// A suite's own options reach it through `bench all --<suite> "ARGS"` (parsed by that suite's
// option parser before anything runs), e.g. --train "--model small --placement 2x1";
// --pytorch is short for --train "--pytorch".
#include <memory>

#include "cli/commands.h"
#include "common/error.h"

#if defined(CPUTRAIN_HAVE_BENCH)
#include <fmt/format.h>

#include <cstdlib>
#include <map>
#include <set>

#include "bench/bench.h"
#include "common/files.h"
#include "common/log.h"
#include "topology/topology.h"
#endif

namespace cputrain::cli {

#if defined(CPUTRAIN_HAVE_BENCH)
namespace {

struct AllOptions {
  CommonOptions common;
  bool quick = false;
  bool pytorch = false;
  std::string json;
  std::vector<std::string> skip;
  std::map<std::string, std::string> args;  // suite -> its options, as one string
};

// The 1-minute load average now (getloadavg), or -1. It includes the benchmark's own threads.
double LoadNow() {
  double l[1] = {-1};
  return getloadavg(l, 1) == 1 ? l[0] : -1;
}

void RunAll(const AllOptions& o) {
  std::vector<std::unique_ptr<bench::Suite>> suites = bench::MakeSuites();
  std::set<std::string> names;
  for (const auto& s : suites) names.insert(s->name());
  for (const std::string& s : o.skip) {
    if (!names.count(s)) {
      std::string all;
      for (const std::string& n : names) all += (all.empty() ? "" : ", ") + n;
      throw InputError(fmt::format("bench all --skip {}: there is no such suite", s),
                       "the suites are " + all);
    }
  }
  // Every suite's options are parsed before anything runs, so a typo fails in a second, not
  // after twenty minutes of measurements.
  std::vector<std::unique_ptr<CLI::App>> parsers;
  for (const auto& s : suites) {
    auto app = std::make_unique<CLI::App>("bench all: " + s->name(), s->name());
    s->AddOptions(app.get());
    std::string args;
    auto it = o.args.find(s->name());
    if (it != o.args.end()) {
      args = it->second;
    } else if (s->name() == "gemm" && !o.quick) {
      args = "--model small --model gpt2-124M";  // the shapes of the train suite's models
    }
    if (s->name() == "train" && o.pytorch) args += " --pytorch";
    try {
      app->parse(args, false);
    } catch (const CLI::ParseError& e) {
      throw InputError(fmt::format("bench all --{} '{}': {}", s->name(), args, e.what()),
                       fmt::format("see `cputrain-numa bench {} --help`", s->name()));
    }
    parsers.push_back(std::move(app));
  }

  bench::BenchContext ctx;
  ctx.config = o.common.Load();
  ctx.quick = o.quick;
  nlohmann::json machine = bench::MachineInfo();
  machine["topology"] = topo::TopologyToJson(topo::LoadTopology(ctx.config.topology));
  nlohmann::json doc = {{"machine", machine},
                        {"command", bench::CommandLine()},
                        {"quick", o.quick},
                        {"suites", nlohmann::json::object()},
                        {"runs", nlohmann::json::object()}};
  nlohmann::json errors = nlohmann::json::object();
  for (const auto& s : suites) {
    if (std::find(o.skip.begin(), o.skip.end(), s->name()) != o.skip.end()) continue;
    std::printf("\n======== bench %s%s\n", s->name().c_str(), o.quick ? " --quick" : "");
    std::fflush(stdout);
    bench::Report report(s->name());
    const double t0 = bench::NowSeconds();
    const double load0 = LoadNow();
    const bench::OthersMeter others_meter;
    try {
      s->Run(ctx, &report);
    } catch (const InputError&) {
      throw;
    } catch (const std::exception& e) {
      // A measurement that failed does not throw away the others: say so, keep going, and exit
      // with an error at the end.
      log::Warn("bench all: suite {} failed: {}", s->name(), e.what());
      errors[s->name()] = e.what();
    }
    const double secs = bench::NowSeconds() - t0, load1 = LoadNow();
    const double others = others_meter.Percent();
    log::Info(
        "bench all: {} took {:.1f} s; other processes used {:.0f}% of the CPUs meanwhile "
        "(1-minute load average {:.2f} before it, {:.2f} after, ours included)",
        s->name(), secs, others, load0, load1);
    doc["suites"][s->name()] = report.records();
    doc["runs"][s->name()] = {
        {"seconds", secs}, {"load_start", load0}, {"load_end", load1}, {"others_cpu_pct", others}};
  }
  if (!errors.empty()) doc["errors"] = errors;
  if (!o.json.empty()) {
    WriteFileAtomic(o.json, doc.dump(2) + "\n");
    log::Info("bench all: report written to {} (`cputrain-numa report {} -o DIR` draws it)", o.json,
              o.json);
  }
  if (!errors.empty()) {
    throw RuntimeError(
        fmt::format("bench all: {} suite(s) failed: {}", errors.size(), errors.dump()));
  }
}

}  // namespace
#endif

void AddBenchCommand(CLI::App& app) {
  CLI::App* bench = app.add_subcommand(
      "bench",
      "Benchmarks: `bench <suite> --help` for a suite's options; --json FILE writes its "
      "records, --quick makes a short smoke run; `bench all` runs every suite");
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
      bench::Report report(e->suite->name());
      e->suite->Run(ctx, &report);
      if (!e->json.empty()) {
        report.WriteJson(e->json);
        log::Info("bench {}: {} records written to {}", e->suite->name(), report.records().size(),
                  e->json);
      }
    });
  }
  auto all = std::make_shared<AllOptions>();
  CLI::App* cmd = bench->add_subcommand(
      "all", "Every suite in one run; --json FILE writes one report for `cputrain-numa report`");
  all->common.AddTo(cmd);
  cmd->add_option("--json", all->json, "write the whole report as one JSON document to this file");
  cmd->add_flag("--quick", all->quick, "every suite's short smoke run");
  cmd->add_flag("--pytorch", all->pytorch, "the train suite also runs PyTorch (its --pytorch)");
  cmd->add_option("--skip", all->skip, "leave a suite out (repeatable)");
  for (const std::unique_ptr<bench::Suite>& s : bench::MakeSuites()) {
    cmd->add_option(fmt::format("--{}", s->name()), all->args[s->name()],
                    fmt::format("options for the {} suite, as one string (see `bench {} --help`)",
                                s->name(), s->name()));
  }
  cmd->callback([all] {
    // Options given as "" count as not given (the map has every suite's key from add_option).
    AllOptions o = *all;
    for (auto it = o.args.begin(); it != o.args.end();) {
      it = it->second.empty() ? o.args.erase(it) : std::next(it);
    }
    RunAll(o);
  });
#else
  bench->callback([] {
    throw InputError("this cputrain-numa was built without the benchmarks",
                     "reconfigure with -DCPUTRAIN_BUILD_BENCH=ON");
  });
#endif
}

}  // namespace cputrain::cli
