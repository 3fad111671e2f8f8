// `cputrain-numa eval`: the validation loss and perplexity of a checkpoint on token files, on
// every replica group of the placement plan, without training.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "common/error.h"
#include "train/trainer.h"

namespace cputrain::cli {

void AddEvalCommand(CLI::App& app) {
  struct Opts {
    CommonOptions common;
    std::string checkpoint;
    std::vector<std::string> data;
    int batches = 0;
    bool json = false;
    std::string adapter;
  };
  auto opts = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "eval",
      "Validation loss and perplexity of a checkpoint on token files (forward only, on every "
      "replica group of the placement); B and T are data.batch_size and data.seq_len");
  cmd->add_option("--checkpoint", opts->checkpoint,
                  "a model.bin, a checkpoint step directory or a run's out_dir (its newest)")
      ->required();
  cmd->add_option("--data", opts->data,
                  "token files: paths or globs (quote them), e.g. 'data/fineweb_val_*.bin'")
      ->required();
  cmd->add_option("--batches", opts->batches,
                  "windows of B*T tokens to average, the first ones in shard order (default: all)")
      ->check(CLI::Range(1, 1 << 30))
      ->default_str("");
  cmd->add_flag("--json", opts->json, "print one JSON object instead of text");
  cmd->add_option("--adapter", opts->adapter,
                  "a PEFT LoRA adapter directory over the checkpoint (the base): evaluates the "
                  "adapted model");
  opts->common.AddTo(cmd);
  cmd->callback([opts] {
    Config cfg = opts->common.Load();
    cfg.model.init_from = opts->checkpoint;
    // Adapters only from --adapter: a training config's train.lora keys describe a run, not
    // this evaluation.
    cfg.train.lora = {};
    cfg.train.lora.adapter = opts->adapter;
    const train::EvalResult r =
        train::EvaluateCheckpoint(cfg, opts->data, opts->batches, /*dist=*/nullptr);
    const double ppl = std::exp(r.loss);
    if (opts->json) {
      const nlohmann::json j = {{"checkpoint", r.model_file},
                                {"loss", r.loss},
                                {"perplexity", ppl},
                                {"windows", r.windows},
                                {"tokens", r.tokens},
                                {"shards", r.shards},
                                {"batch_size", cfg.data.batch_size},
                                {"seq_len", cfg.data.seq_len},
                                {"groups", r.groups},
                                {"seconds", r.seconds}};
      std::printf("%s\n", j.dump().c_str());
      return;
    }
    std::printf(
        "%s: val loss %.6f, perplexity %.4f over %d of %zu windows (%llu tokens, B=%d "
        "T=%d, %zu shard(s)) on %d group(s) in %.2f s\n",
        r.model_file.c_str(), r.loss, ppl, r.windows, r.available_windows,
        static_cast<unsigned long long>(r.tokens), cfg.data.batch_size, cfg.data.seq_len, r.shards,
        r.groups, r.seconds);
  });
}

}  // namespace cputrain::cli
