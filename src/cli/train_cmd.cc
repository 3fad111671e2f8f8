// `cputrain-numa train`: trains with the config (default: the built-in quickstart config).
#include <fmt/format.h>

#include <cstdlib>
#include <memory>

#include "cli/commands.h"
#include "cli/signals.h"
#include "common/error.h"
#include "common/stop.h"
#include "mpi/bridge.h"
#include "train/trainer.h"

namespace cputrain::cli {

void AddTrainCommand(CLI::App& app, const std::string& command_line) {
  struct Opts {
    CommonOptions common;
    std::string progress = "auto";
    bool resume_fallback = false;
  };
  auto opts = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "train",
      "Train a GPT-2 or Llama on the configured placement (one replica group per socket by "
      "default); "
      "writes out_dir/{metrics.jsonl, checkpoints/, latest, placement.json, config.yaml}; "
      "continues from out_dir's newest checkpoint (train.resume: auto)");
  opts->common.AddTo(cmd);
  cmd->add_option("--progress", opts->progress,
                  "auto (a bar on a terminal, else lines), bar, lines or quiet")
      ->check(CLI::IsMember({"auto", "bar", "lines", "quiet"}));
  cmd->add_flag("--resume-fallback", opts->resume_fallback,
                "if the newest checkpoint is damaged or incomplete (checksum mismatch, state.bin "
                "missing), resume from the newest good one, saying which was skipped and why "
                "(default: refuse, exit 2); the same as --set train.resume_fallback=true");
  cmd->callback([opts, command_line] {
    // SIGINT, SIGTERM, SIGHUP: finish the step, save the checkpoint, exit 128 + signal. A
    // second one ends the process at once (signals.h). Installed first, so that one arriving
    // during start-up is kept (not lost to an inherited SIG_IGN) until Train polls the token.
    StopToken stop;
    StopOnSignals on_signals(stop);
    if (opts->resume_fallback) opts->common.sets.push_back("train.resume_fallback=true");
    Config cfg = opts->common.Load();
    train::TrainOptions o;
    o.progress = opts->progress == "bar"     ? train::Progress::kBar
                 : opts->progress == "lines" ? train::Progress::kLines
                 : opts->progress == "quiet" ? train::Progress::kQuiet
                                             : train::Progress::kAuto;
    o.stop = &stop;
    // Under mpirun (or with mpi.enabled: on) the bridge joins this process to the others.
    std::unique_ptr<mpi::Bridge> bridge =
        mpi::Bridge::Start(cfg.mpi, [](int exit_code) { std::_Exit(exit_code); });
    o.dist = bridge.get();
    train::TrainResult r;
    try {
      r = train::Train(cfg, o);
    } catch (const Error& e) {
      // The other ranks wait for this one: end the whole job with this error's exit code.
      if (bridge && bridge->size() > 1) {
        bridge->Abort(e.exit_code(), fmt::format("error: {}{}", e.what(),
                                                 e.hint().empty() ? "" : "\nhint: " + e.hint()));
      }
      if (bridge) bridge->Finish();
      throw;
    } catch (const std::exception& e) {
      if (bridge && bridge->size() > 1) bridge->Abort(1, fmt::format("error: {}", e.what()));
      if (bridge) bridge->Finish();
      throw;
    }
    if (bridge) bridge->Finish();
    if (r.stopped) {
      const int signo = r.stop_reason > 0 ? r.stop_reason : SIGTERM;
      // train.resume: auto (the default) makes the same command line continue the run.
      std::string resume =
          cfg.train.resume == "auto" ? command_line : command_line + " --set train.resume=auto";
      if (bridge && bridge->size() > 1) resume = "the same mpirun command (train.resume: auto)";
      throw StopExit(
          128 + signo,
          fmt::format("stopped by {} after step {}; checkpoint {}; resume: {}",
                      r.stop_reason > 0 ? SignalName(r.stop_reason) : "a signal on another rank",
                      r.last_step, r.checkpoint.empty() ? "saved by rank 0" : r.checkpoint,
                      resume));
    }
  });
}

}  // namespace cputrain::cli
