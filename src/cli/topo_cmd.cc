// `cputrain-numa topo`: the machine and the placement plan, as text or one JSON document.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "common/error.h"
#include "common/log.h"
#include "kernels/bf16.h"
#include "kernels/calibrate.h"
#include "kernels/kernels.h"
#include "topology/placement.h"
#include "topology/topology.h"
#include "train/trainer.h"

namespace cputrain::cli {

void AddTopoCommand(CLI::App& app) {
  struct Opts {
    CommonOptions common;
    bool json = false;
  };
  auto opts = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "topo",
      "Show the machine (packages, NUMA nodes, cores, PUs, distances) and the placement "
      "plan: one replica group per socket by default");
  opts->common.AddTo(cmd);
  cmd->add_flag("--json", opts->json, "print exactly one JSON document on stdout");
  cmd->callback([opts] {
    Config cfg = opts->common.Load();
    topo::Topology t = topo::LoadTopology(cfg.topology);
    const std::string binding = topo::AdoptLaunchBinding(t);
    if (!binding.empty()) log::Warn("{}", binding);
    topo::Plan plan = topo::PlanPlacement(t, cfg.placement, std::getenv("OMP_NUM_THREADS"));
    // Which train.precision values run natively on this CPU, and the kernels each class of a
    // run's products would run on (train.fp32_kernel, train.bf16_kernel; measured per class for
    // the config's model: kernels/calibrate.h).
    const kernels::Bf16Support bf16 = kernels::DetectBf16();
    const kernels::Bf16Kernel requested =
        kernels::ParseBf16Kernel(cfg.train.bf16_kernel).value_or(kernels::Bf16Kernel::kAuto);
    const kernels::Fp32Kernel fp32 =
        kernels::ParseFp32Kernel(cfg.train.fp32_kernel).value_or(kernels::Fp32Kernel::kAuto);
    std::string kernel_line, kernel_name = "none";
    try {
      const kernels::Bf16Kernel k = kernels::UseBf16Kernel(requested);
      kernel_line = kernels::Bf16KernelLine(k, requested);
      kernel_name = kernels::Bf16KernelName(k);
    } catch (const InputError& e) {
      kernel_line = std::string("bf16 products: none (") + e.what() + ")";
    }
    // The fp32 classes as an fp32 run of this config chooses them; the bf16 ones where bf16 runs.
    Config fcfg = cfg;
    fcfg.train.bf16 = false;
    const train::KernelSetup fk = train::KernelsFor(fcfg);
    std::string fp32_line = fk.fp32 ? kernels::DescribeChoice(*fk.fp32)
                                    : kernels::Fp32KernelLine(kernels::UseFp32Kernel(fp32), fp32);
    if (const std::string d = kernels::LibraryDiagnosis(fk.fp32 ? &*fk.fp32 : nullptr); !d.empty())
      fp32_line += "\n" + d;
    nlohmann::json kernels_json = fk.ToJson();
    if (kernel_name != "none" && requested == kernels::Bf16Kernel::kAuto) {
      Config bcfg = cfg;
      bcfg.train.bf16 = true;
      const train::KernelSetup bk = train::KernelsFor(bcfg);
      if (bk.bf16) {
        kernel_line = kernels::DescribeChoice(*bk.bf16);
        kernel_name = bk.bf16->classes.front().chosen;
        kernels_json["bf16"] = bk.ToJson()["bf16"];
      }
    }
    const std::string fp32_name =
        fk.fp32 ? fk.fp32->classes.front().chosen
                : kernels::Fp32KernelName(kernels::ActiveFp32Kernel(kernels::GemmClass::kFwd));
    if (opts->json) {
      nlohmann::json j = topo::PlanToJson(plan);
      j["topology"] = topo::TopologyToJson(t);
      j["precisions"] = {{"fp32", true},
                         {"bf16", bf16.native()},
                         {"bf16_detail", bf16.Describe()},
                         {"bf16_kernel", kernel_name},
                         {"bf16_kernel_detail", kernel_line},
                         {"fp32_kernel", fp32_name},
                         {"fp32_kernel_detail", fp32_line}};
      j["kernels"] = kernels_json;
      std::printf("%s\n", j.dump(2).c_str());
      for (const std::string& w : plan.warnings) log::Warn("{}", w);
      return;
    }
    std::printf("%s%s", topo::DescribeTopology(t).c_str(), topo::DescribePlan(plan).c_str());
    std::printf("precisions: fp32 native; %s\n%s\n%s\n", bf16.Describe().c_str(), fp32_line.c_str(),
                kernel_line.c_str());
  });
}

void AddConfigCommand(CLI::App& app) {
  struct Opts {
    CommonOptions common;
    bool keys = false;
  };
  auto opts = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "config", "Print the effective configuration (file + --set) as YAML, or every key");
  opts->common.AddTo(cmd);
  cmd->add_flag("--keys", opts->keys, "list every key with its type and default");
  cmd->callback([opts] {
    if (opts->keys) {
      for (const ConfigKeyInfo& k : ConfigKeys()) {
        std::printf("%-28s %-40s default %s\n    %s\n",
                    (k.section.empty() ? k.key : k.section + "." + k.key).c_str(), k.type.c_str(),
                    k.default_value.c_str(), k.description.c_str());
      }
      return;
    }
    std::printf("%s", ConfigToYaml(opts->common.Load()).c_str());
  });
}

}  // namespace cputrain::cli
