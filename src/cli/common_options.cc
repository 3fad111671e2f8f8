#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
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

// CLI11 reads an unsigned option with strtoull(text, 0): "-1" wraps to 2^64 - 1 (the same seed,
// bit for bit), "010" is octal 8 and "0x10" hexadecimal, where Python's int() (the Trainer's
// --seed) refuses the sign and the prefix and reads 010 as 10. So the text must be decimal
// digits that fit 64 bits, and is handed on without its leading zeros.
CLI::Validator SeedRange() {
  const std::string range = fmt::format("an integer in [0, {}]", UINT64_MAX);
  return CLI::Validator(
      [range](std::string& text) -> std::string {
        std::uint64_t v = 0;
        const char* end = text.data() + text.size();
        const bool digits =
            !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
        const auto r = std::from_chars(text.data(), end, v);
        if (!digits || r.ec != std::errc() || r.ptr != end) {
          return fmt::format("'{}' is not a seed: it must be {}", text, range);
        }
        text = std::to_string(v);
        return "";
      },
      range);
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
