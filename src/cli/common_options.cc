#include "cli/commands.h"

namespace cputrain::cli {

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
}

Config CommonOptions::Load() const {
  std::vector<std::string> all = sets;
  if (!topology.empty()) all.push_back("topology=" + topology);
  return LoadConfig(config_path, all);
}

}  // namespace cputrain::cli
