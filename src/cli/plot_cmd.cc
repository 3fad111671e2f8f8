// `cputrain-numa plot METRICS.jsonl -o loss.svg`: training and validation loss against step.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "common/error.h"
#include "common/files.h"
#include "report/svg.h"

namespace cputrain::cli {

void AddPlotCommand(CLI::App& app) {
  struct Opts {
    std::string metrics, out = "loss.svg", title;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd =
      app.add_subcommand("plot", "Draw train and validation loss from metrics.jsonl as SVG");
  cmd->add_option("metrics", o->metrics, "metrics.jsonl written by `cputrain-numa train`")
      ->required();
  cmd->add_option("-o,--output", o->out, "SVG file to write");
  cmd->add_option("--title", o->title, "chart title (default: the metrics path)");
  cmd->callback([o] {
    std::ifstream in(o->metrics);
    if (!in) {
      throw InputError(fmt::format("cannot read '{}'", o->metrics),
                       "pass the metrics.jsonl of a run (in its train.out_dir)");
    }
    report::Series train{"train loss", {}, {}, "#9ecae1", true, false, 1.2};
    report::Series smooth{"train loss (EMA 0.9)", {}, {}, "#1f77b4", true, false, 2.0};
    report::Series val{"validation loss", {}, {}, "#d62728", true, true, 2.0};
    std::string line;
    int lineno = 0;
    double ema = 0, weight = 0;
    while (std::getline(in, line)) {
      ++lineno;
      if (line.empty()) continue;
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception& e) {
        throw InputError(fmt::format("{}:{}: not a JSON object: {}", o->metrics, lineno, e.what()),
                         "pass a metrics.jsonl written by cputrain-numa train");
      }
      if (!j.is_object() || !j.contains("step")) continue;
      const double step = j["step"].get<double>();
      if (j.contains("loss") && j["loss"].is_number()) {
        const double l = j["loss"].get<double>();
        train.x.push_back(step);
        train.y.push_back(l);
        ema = 0.9 * ema + 0.1 * l;  // bias-corrected exponential moving average
        weight = 0.9 * weight + 0.1;
        smooth.x.push_back(step);
        smooth.y.push_back(ema / weight);
      }
      if (j.contains("val_loss") && j["val_loss"].is_number()) {
        val.x.push_back(step);
        val.y.push_back(j["val_loss"].get<double>());
      }
    }
    if (train.x.empty() && val.x.empty()) {
      throw InputError(fmt::format("'{}' has no loss records", o->metrics),
                       "plot the metrics.jsonl of a run that trained at least one step");
    }
    report::LineChart chart;
    chart.title = o->title.empty() ? fmt::format("loss: {}", o->metrics) : o->title;
    chart.x.label = "step";
    chart.y.label = "loss (nats/token)";
    chart.series = {train, smooth, val};
    WriteFileAtomic(o->out, report::RenderLineChart(chart));
    std::printf("wrote %s (%zu steps, %zu evaluations)\n", o->out.c_str(), train.x.size(),
                val.x.size());
  });
}

}  // namespace cputrain::cli
