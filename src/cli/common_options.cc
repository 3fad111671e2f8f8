#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "cli/commands.h"
#include "train/kernel_setup.h"

namespace cputrain::cli {
namespace {

CLI::Validator NumberCheck(double lo, double hi, std::string bound) {
  return CLI::Validator(
      [lo, hi, bound](std::string& text) -> std::string {
        const char* s = text.c_str();
        char* end = nullptr;
        errno = 0;
        const double v = std::strtod(s, &end);
        if (end == s || *end != '\0') return fmt::format("'{}' is not a number", text);
        if (!std::isfinite(v) || errno == ERANGE) {
          return fmt::format("'{}' is not a finite number: it must be {}", text, bound);
        }
        if (v < lo || v > hi) return fmt::format("{} is out of range: it must be {}", text, bound);
        return "";
      },
      bound);
}

}  // namespace

CLI::Validator FiniteRange(double lo, double hi) {
  return NumberCheck(lo, hi, fmt::format("in [{}, {}]", lo, hi));
}

CLI::Validator AtLeast(double lo) {
  return NumberCheck(lo, std::numeric_limits<double>::max(), fmt::format(">= {}", lo));
}

void CommonOptions::AddTo(CLI::App* cmd) {
  cmd->add_option("-c,--config", config_path,
                  "YAML config file (default: the built-in configs/quickstart.yaml)");
  cmd->add_option("--set", sets,
                  "override a config key, section.key=value (repeatable), e.g. "
                  "--set placement.hyperthreads=true")
      ->take_all()
      ->allow_extra_args(false);
  cmd->add_option("--topology", topology,
                  "machine to plan on: this | synthetic:<hwloc description> | xml:<file> "
                  "(overrides the config's topology)");
  // The calibration's cache is per machine and run shape (kernels/calibrate.h): a flag, not a
  // config key, because it changes no result's meaning; the environment carries it to the
  // processes a command starts (bench's rows).
  cmd->add_flag_callback(
      "--recalibrate", [] { ::setenv(train::kRecalibrateEnv, "1", 1); },
      "measure again which kernel runs each class of products, whatever the calibration cache "
      "holds (CPUTRAIN_RECALIBRATE=1)");
}

Config CommonOptions::Load() const {
  Config c = LoadConfig(config_path, sets);
  // Taken as it is, not as YAML through --set: "synthetic:" would read as a mapping and be
  // reported as a --set error; LoadTopology judges the spec and names it.
  if (!topology.empty()) {
    c.topology = topology;
    c.source += " + --topology";
  }
  return c;
}

}  // namespace cputrain::cli
