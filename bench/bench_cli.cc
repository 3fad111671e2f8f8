// The `bench` and `report` subcommands of cputrain-numa, defined here rather than in src/cli so
// that src/ never includes bench/: src/cli/commands.h declares AddBenchCommand and
// AddReportCommand, main() calls them, and this file (library cputrain_bench_cli, linked into
// the executable when CPUTRAIN_BUILD_BENCH=ON) defines them. Without the benchmarks,
// src/cli/no_bench_cmd.cc defines both instead and says they were not built.
//
// `cputrain-numa bench <suite>`: each suite of bench.h a subcommand with the shared options
// --config/--set/--topology (CommonOptions), --json FILE and --quick, plus its own; and
// `bench all`, which runs every suite in one process and writes one BenchDocument (schema.h).
// A suite's own options reach it through `bench all --<suite> "ARGS"` (parsed by that suite's
// option parser before anything runs), e.g. --train "--model small --placement 2x1";
// --pytorch is short for --train "--pytorch".
//
// `cputrain-numa report RESULTS.json -o DIR`: report.h's charts and README.md from a results file.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>

#include "bench/bench.h"
#include "bench/report.h"
#include "cli/commands.h"
#include "common/error.h"
#include "common/files.h"
#include "common/log.h"
#include "topology/topology.h"

namespace cputrain::cli {
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

void CheckSkips(const AllOptions& o, const std::vector<std::unique_ptr<bench::Suite>>& suites) {
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
}

// Every suite's options are parsed before anything runs, so a typo fails in a second, not
// after twenty minutes of measurements. Returns the parsers: they own the parsed options' links.
std::vector<std::unique_ptr<CLI::App>> ParseSuiteOptions(
    const AllOptions& o, const std::vector<std::unique_ptr<bench::Suite>>& suites) {
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
  return parsers;
}

// Runs one suite of `bench all` into *doc. A measurement that failed does not throw away the
// others: it is logged and recorded in doc->errors; a bad option (InputError) still stops all.
void RunOneOfAll(bench::Suite& s, const bench::BenchContext& ctx, bench::BenchDocument* doc) {
  std::printf("\n======== bench %s%s\n", s.name().c_str(), ctx.quick ? " --quick" : "");
  std::fflush(stdout);
  bench::SuiteRecords records(s.name());
  const double t0 = bench::NowSeconds();
  const double load0 = LoadNow();
  const bench::OthersMeter others_meter;
  try {
    s.Run(ctx, &records);
  } catch (const InputError&) {
    throw;
  } catch (const std::exception& e) {
    log::Warn("bench all: suite {} failed: {}", s.name(), e.what());
    doc->errors[s.name()] = e.what();
  }
  bench::RunStats run;
  run.seconds = bench::NowSeconds() - t0;
  run.load_start = load0;
  run.load_end = LoadNow();
  run.others_cpu_pct = others_meter.Percent();
  log::Info(
      "bench all: {} took {:.1f} s; other processes used {:.0f}% of the CPUs meanwhile "
      "(1-minute load average {:.2f} before it, {:.2f} after, ours included)",
      s.name(), run.seconds, run.others_cpu_pct, run.load_start, run.load_end);
  doc->suites.push_back(std::move(records));
  doc->runs[s.name()] = run;
}

void RunAll(const AllOptions& o) {
  std::vector<std::unique_ptr<bench::Suite>> suites = bench::MakeSuites();
  CheckSkips(o, suites);
  const auto parsers = ParseSuiteOptions(o, suites);

  bench::BenchContext ctx;
  ctx.config = o.common.Load();
  ctx.quick = o.quick;
  bench::BenchDocument doc;
  doc.machine = bench::MachineInfo();
  doc.machine->topology = topo::TopologyToJson(topo::LoadTopology(ctx.config.topology));
  std::printf("machine: %s\n", doc.machine->Describe().c_str());
  doc.command = bench::CommandLine();
  doc.quick = o.quick;
  for (const auto& s : suites) {
    if (std::find(o.skip.begin(), o.skip.end(), s->name()) != o.skip.end()) continue;
    RunOneOfAll(*s, ctx, &doc);
  }
  if (!o.json.empty()) {
    WriteFileAtomic(o.json, doc.ToJson().dump(2) + "\n");
    log::Info("bench all: report written to {} (`cputrain-numa report {} -o DIR` draws it)", o.json,
              o.json);
  }
  if (!doc.errors.empty()) {
    throw RuntimeError(fmt::format("bench all: {} suite(s) failed: {}", doc.errors.size(),
                                   nlohmann::json(doc.errors).dump()));
  }
}

void AddSuiteCommand(CLI::App* bench, std::unique_ptr<bench::Suite> suite) {
  struct Entry {
    std::unique_ptr<bench::Suite> suite;
    CommonOptions common;
    bool quick = false;
    std::string json;
  };
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
    // The CPU beside every figure (the machine kind changes between runs).
    std::printf("machine: %s\n", bench::MachineInfo().Describe().c_str());
    bench::SuiteRecords records(e->suite->name());
    e->suite->Run(ctx, &records);
    if (!e->json.empty()) {
      records.WriteJson(e->json);
      log::Info("bench {}: {} records written to {}", e->suite->name(), records.records().size(),
                e->json);
    }
  });
}

void AddAllCommand(CLI::App* bench) {
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
}

}  // namespace

void AddBenchCommand(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", kBenchCommandHelp);
  bench->require_subcommand(1);
  for (std::unique_ptr<bench::Suite>& suite : bench::MakeSuites()) {
    AddSuiteCommand(bench, std::move(suite));
  }
  AddAllCommand(bench);
}

void AddReportCommand(CLI::App& app) {
  struct Opts {
    std::string results, dir = "bench-report";
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = AddReportOptions(app, &o->results, &o->dir);
  cmd->callback([o] {
    const bench::BenchDocument doc = bench::BenchDocument::Load(o->results);
    for (const std::string& f : bench::WriteBenchReport(doc, o->results, o->dir)) {
      std::printf("wrote %s\n", f.c_str());
    }
  });
}

}  // namespace cputrain::cli
