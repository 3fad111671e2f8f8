// `cputrain-numa train`: trains with the config (default: the built-in quickstart config).
#include <fmt/format.h>

#include <memory>

#include "cli/commands.h"
#include "common/error.h"
#include "mpi/bridge.h"
#include "train/trainer.h"

namespace cputrain::cli {

// Ctrl-C: the run stops after the current step, saves its checkpoint, and exits with 130.
class Interrupted : public Error {
 public:
  explicit Interrupted(std::string m) : Error(std::move(m), "", 130) {}
};

void AddTrainCommand(CLI::App& app) {
  struct Opts {
    CommonOptions common;
    std::string progress = "auto";
  };
  auto opts = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "train",
      "Train GPT-2 on the configured placement (one replica group per socket by default); "
      "writes out_dir/{metrics.jsonl, model.bin, placement.json, config.yaml}");
  opts->common.AddTo(cmd);
  cmd->add_option("--progress", opts->progress,
                  "auto (a bar on a terminal, else lines), bar, lines or quiet")
      ->check(CLI::IsMember({"auto", "bar", "lines", "quiet"}));
  cmd->callback([opts] {
    Config cfg = opts->common.Load();
    train::TrainOptions o;
    o.progress = opts->progress == "bar"     ? train::Progress::kBar
                 : opts->progress == "lines" ? train::Progress::kLines
                 : opts->progress == "quiet" ? train::Progress::kQuiet
                                             : train::Progress::kAuto;
    o.handle_sigint = true;
    // Under mpirun (or with mpi.enabled: on) the bridge joins this process to the others.
    std::unique_ptr<mpi::Bridge> bridge = mpi::Bridge::Start(cfg.mpi);
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
    if (r.interrupted) {
      throw Interrupted(fmt::format("interrupted after step {}; checkpoint saved in {}/model.bin",
                                    r.steps.empty() ? 0 : r.steps.back().step, cfg.train.out_dir));
    }
  });
}

}  // namespace cputrain::cli
