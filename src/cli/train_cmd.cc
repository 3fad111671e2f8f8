// `cputrain-numa train`: trains with the config (default: the built-in quickstart config).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <memory>

#include "cli/commands.h"
#include "cli/signals.h"
#include "cli/train_job.h"
#include "common/error.h"
#include "common/stop.h"
#include "model/family.h"
#include "mpi/bridge.h"
#include "train/trainer.h"

namespace cputrain::cli {

void AddTrainCommand(CLI::App& app, const std::string& command_line) {
  struct Opts {
    CommonOptions common;
    std::string progress = "auto";
    bool resume_fallback = false;
    std::string adapter;
  };
  auto opts = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "train",
      fmt::format("Train a model of one of the families {} on the configured placement (one "
                  "replica group per socket by default); "
                  "writes out_dir/{{metrics.jsonl, checkpoints/, latest, placement.json, "
                  "config.yaml}}; "
                  "continues from out_dir's newest checkpoint (train.resume: auto)",
                  model::FamilyNames()));
  opts->common.AddTo(cmd);
  cmd->add_option("--progress", opts->progress,
                  "auto (a bar on a terminal, else lines), bar, lines or quiet")
      ->check(CLI::IsMember({"auto", "bar", "lines", "quiet"}));
  cmd->add_flag("--resume-fallback", opts->resume_fallback,
                "if the newest checkpoint is damaged or incomplete (checksum mismatch, state.bin "
                "missing), resume from the newest good one, saying which was skipped and why "
                "(default: refuse, exit 2); the same as --set train.resume_fallback=true");
  cmd->add_option("--adapter", opts->adapter,
                  "a PEFT LoRA adapter directory to continue training over model.init_from "
                  "(docs/lora.md); the same as --set train.lora.adapter=DIR");
  cmd->callback([opts, command_line] {
    // SIGINT, SIGTERM, SIGHUP: finish the step, save the checkpoint, exit 128 + signal. A
    // second one ends the process at once (signals.h). Installed first, so that one arriving
    // during start-up is kept (not lost to an inherited SIG_IGN) until Train polls the token.
    StopToken stop;
    StopOnSignals on_signals(stop);
    if (opts->resume_fallback) opts->common.sets.push_back("train.resume_fallback=true");
    if (!opts->adapter.empty()) opts->common.sets.push_back("train.lora.adapter=" + opts->adapter);
    Config cfg = opts->common.Load();
    train::TrainOptions o;
    o.progress = ProgressFromFlag(opts->progress);
    o.stop = &stop;
    // Under mpirun (or with mpi.enabled: on) the bridge joins this process to the others.
    std::unique_ptr<mpi::Bridge> bridge =
        mpi::Bridge::Start(cfg.mpi, [](int exit_code) { std::_Exit(exit_code); });
    // train.resume: auto (the default) makes the same command line continue the run.
    TrainAsJob(
        cfg, o, bridge.get(),
        cfg.train.resume == "auto" ? command_line : command_line + " --set train.resume=auto");
  });
}

}  // namespace cputrain::cli
