// The task commands' flags (task_command.h): run_*.py's and the Trainer's, shared by every task,
// then the task's own (task::Option), each with both spellings (--max_seq_length and
// --max-seq-length); and the registration of every task's commands. What they run is
// task_run.cc.
#include "cli/task_command.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/task_run.h"
#include "common/error.h"

namespace cputrain::cli {
namespace {

using task::Command;

// Both spellings of each flag: run_qa.py's --max_seq_length and the CLI's --max-seq-length.
std::string Flag(const std::string& underscored) {
  std::string dashed = underscored;
  for (char& c : dashed)
    if (c == '_') c = '-';
  return "--" + underscored + (dashed != underscored ? ",--" + dashed : "");
}

// A shared flag with the task's other spelling of it, if it has one (sft's --dataset_path).
std::string Flag(const std::string& underscored, const task::Task& t) {
  const std::string alias = t.FlagAlias(underscored);
  return alias.empty() ? Flag(underscored) : Flag(underscored) + "," + Flag(alias);
}

// What every command of every task takes: the model, the tokenizer, the output, the shape of a
// feature, prediction's batch, the precision, the engine's config.
void AddModelOptions(CLI::App* cmd, TaskCommand& c) {
  task::Args& a = c.args;
  const task::TaskInfo& info = c.task->info();
  c.common.AddTo(cmd);
  cmd->add_option(Flag("model_name_or_path"), a.model, info.model_help)->required();
  cmd->add_option(Flag("tokenizer_name"), a.tokenizer,
                  "the tokenizer: vocab.txt, tokenizer.json or their directory (default: "
                  "--model_name_or_path)");
  cmd->add_option(Flag("output_dir"), a.output_dir, "where the outputs go")->required();
  cmd->add_option(Flag("max_seq_length", *c.task), a.max_seq_length,
                  "tokens per feature, specials included")
      ->check(CLI::Range(4, 1 << 16));
  cmd->add_option(Flag("per_device_eval_batch_size"), a.eval_batch,
                  "features per replica group in each prediction batch")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_flag(Flag("bf16"), a.bf16,
                "bf16 products with fp32 master weights (train.precision: bf16; needs "
                "AVX512_BF16)");
  cmd->add_option(Flag("max_eval_samples"), a.max_eval_samples,
                  "use only the first N validation examples (0: all)")
      ->check(CLI::Range(0, 1 << 30));
  cmd->add_option(Flag("progress"), a.progress,
                  "auto (a bar on a terminal, else lines), bar, lines or quiet")
      ->check(CLI::IsMember({"auto", "bar", "lines", "quiet"}));
  cmd->add_option(Flag("adapter"), a.adapter,
                  "a PEFT LoRA adapter directory over --model_name_or_path (the base): predict "
                  "with the adapted model, or continue training the adapter (docs/lora.md)");
}

// The Trainer's optimization and schedule flags (train only).
void AddOptimizerOptions(CLI::App* cmd, task::Args& a) {
  cmd->add_option(Flag("per_device_train_batch_size"), a.train_batch,
                  "features per replica group in each micro-batch (one group per socket: "
                  "run_*.py's per-process batch under mpirun)")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option(Flag("gradient_accumulation_steps"), a.accum, "micro-batches per update")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option(Flag("optim"), a.optim,
                  "the optimizer, HF's names: adamw_torch (torch.optim.AdamW), adafactor "
                  "(transformers' Adafactor as the Trainer makes it: the schedule's lr, no "
                  "parameter scale) or sgd (torch.optim.SGD)")
      ->check(CLI::IsMember({"adamw_torch", "adamw_torch_fused", "adafactor", "sgd"}));
  cmd->add_option(Flag("optim_args"), a.optim_args,
                  "settings of --optim, key=value,...: sgd's momentum, dampening, nesterov; "
                  "adafactor's scale_parameter, relative_step, warmup_init, decay_rate, "
                  "clip_threshold, beta1, eps1, eps2 (docs/config.md, optim.*)");
  cmd->add_option(Flag("learning_rate"), a.lr, "the peak learning rate")->check(FiniteRange(0, 1));
  cmd->add_option(Flag("num_train_epochs"), a.epochs, "epochs over the training features")
      ->check(FiniteRange(0, 1e6));
  cmd->add_option(Flag("max_steps"), a.max_steps, "updates to train (replaces the epochs)");
  cmd->add_option(Flag("warmup_ratio"), a.warmup_ratio, "share of the steps warming up from 0")
      ->check(FiniteRange(0, 1));
  cmd->add_option(Flag("warmup_steps"), a.warmup_steps, "warmup steps (replaces the ratio)")
      ->check(CLI::Range(0, 1 << 30));
  cmd->add_option(Flag("weight_decay"), a.weight_decay,
                  "weight decay of the weights (not biases or norms)")
      ->check(FiniteRange(0, 1e3));
  cmd->add_option(Flag("adam_beta1"), a.beta1, "AdamW beta1")->check(FiniteRange(0, 0.999999));
  cmd->add_option(Flag("adam_beta2"), a.beta2, "AdamW beta2")->check(FiniteRange(0, 0.999999));
  cmd->add_option(Flag("adam_epsilon"), a.adam_eps, "AdamW epsilon")->check(FiniteRange(0, 1));
  cmd->add_option(Flag("max_grad_norm"), a.max_grad_norm, "gradient clipping norm (0: none)")
      ->check(FiniteRange(0, 1e30));
  cmd->add_option(Flag("save_steps"), a.save_steps, "checkpoint every N steps (0: at the end only)")
      ->check(CLI::Range(0, 1 << 30));
  cmd->add_option(Flag("seed"), a.seed, "seed of the new head, the feature order and dropout")
      ->check(SeedRange());
  cmd->add_option(Flag("report_to"), a.report_to,
                  "also report the metrics to: none, tensorboard or all (an event file in "
                  "output_dir/runs; train.report_to)")
      ->check(CLI::IsMember({"none", "tensorboard", "all"}));
}

// LoRA (docs/lora.md): the flags go in as the train.lora keys they stand for.
void AddLoraOptions(CLI::App* cmd, task::Args& a) {
  cmd->add_option(Flag("lora_r"), a.lora_r,
                  "train a LoRA adapter of this rank over the frozen model instead of every "
                  "weight (train.lora.r; the task's head trains fully, as PEFT's task types)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option(Flag("lora_alpha"), a.lora_alpha, "LoRA alpha (scale alpha / r)")
      ->check(FiniteRange(1e-6, 1e6));
  cmd->add_option(Flag("lora_dropout"), a.lora_dropout, "dropout of the adapters' input")
      ->check(FiniteRange(0, 0.999));
  cmd->add_option(Flag("lora_target_modules"), a.lora_targets,
                  "modules to adapt, comma-separated PEFT names (default: the family's, PEFT's "
                  "own where it has one; all-linear)");
}

void AddTrainOptions(CLI::App* cmd, TaskCommand& c) {
  task::Args& a = c.args;
  const task::TaskInfo& info = c.task->info();
  cmd->add_option(Flag("train_file", *c.task), a.train_file, info.file_help)->required();
  cmd->add_option(Flag("validation_file", *c.task), a.validation_file,
                  "predicted and scored after training with --do_eval");
  cmd->add_flag(Flag("do_train"), a.do_train, "accepted for run_*.py's command lines");
  cmd->add_flag(Flag("do_eval"), a.do_eval,
                "after training, predict --validation_file and score it (eval_results.json)");
  if (info.test_file) {
    cmd->add_option(Flag("test_file"), a.test_file, "predicted after training with --do_predict");
    cmd->add_flag(Flag("do_predict"), a.do_predict, "after training, predict --test_file");
    cmd->add_option(Flag("max_predict_samples"), a.max_predict_samples,
                    "use only the first N test examples (0: all)")
        ->check(CLI::Range(0, 1 << 30));
  }
  AddOptimizerOptions(cmd, a);
  cmd->add_option(Flag("max_train_samples"), a.max_train_samples,
                  "use only the first N training examples (0: all)")
      ->check(CLI::Range(0, 1 << 30));
  cmd->add_flag(Flag("overwrite_output_dir"), a.overwrite_output_dir,
                "start afresh in an --output_dir that holds a run (its checkpoints and metrics "
                "are removed once every input has been checked) instead of resuming it");
  cmd->add_flag(Flag("use_ipex"), c.use_ipex, "accepted for run_*.py's command lines (a no-op)");
  cmd->add_option(Flag("ddp_backend"), c.ddp_backend,
                  "accepted for run_*.py's command lines (a no-op: the engine's collectives)");
  cmd->add_flag("--resume-fallback", a.resume_fallback,
                "resume from the newest good checkpoint if the newest is damaged (as train's)");
  cmd->add_flag(Flag("gradient_checkpointing"), a.gradient_checkpointing,
                "recompute each block in the backward from its input: one layer's activations "
                "instead of every layer's, the same gradients (train.gradient_checkpointing)");
  AddLoraOptions(cmd, a);
}

// A task's own option on cmd: its value's type picks the CLI11 option; numbers are checked
// finite and in range.
void AddOption(CLI::App* cmd, const task::Option& o) {
  const std::string flag = Flag(o.name);
  CLI::Option* opt = nullptr;
  if (auto* b = std::get_if<bool*>(&o.value)) {
    opt = cmd->add_flag(flag, **b, o.help);
  } else if (auto* i = std::get_if<int*>(&o.value)) {
    opt = cmd->add_option(flag, **i, o.help)->check(FiniteRange(o.min, o.max));
  } else if (auto* d = std::get_if<double*>(&o.value)) {
    opt = cmd->add_option(flag, **d, o.help)->check(FiniteRange(o.min, o.max));
  } else if (auto* s = std::get_if<std::string*>(&o.value)) {
    opt = cmd->add_option(flag, **s, o.help);
    if (!o.choices.empty()) opt->check(CLI::IsMember(o.choices));
  }
  if (o.required) opt->required();
}

void AddTaskOptions(CLI::App* cmd, TaskCommand& c, Command which) {
  for (const task::Option& o : c.options)
    if (o.commands & static_cast<unsigned>(which)) AddOption(cmd, o);
}

// A command's state, shared between its options (filled by parsing) and its callback.
std::shared_ptr<TaskCommand> NewCommand(const task::TaskEntry& entry) {
  auto c = std::make_shared<TaskCommand>();
  c->task = entry.make();
  c->task->Defaults(c->args);
  c->options = c->task->Options();
  return c;
}

void AddTrain(CLI::App* parent, const task::TaskEntry& entry, const std::string& command_line) {
  auto c = NewCommand(entry);
  CLI::App* cmd = parent->add_subcommand("train", c->task->info().train_help);
  AddModelOptions(cmd, *c);
  AddTrainOptions(cmd, *c);
  AddTaskOptions(cmd, *c, Command::kTrain);
  cmd->callback([c, command_line] { RunTaskTrain(*c, command_line); });
}

void AddPredict(CLI::App* parent, const task::TaskEntry& entry, Command which) {
  auto c = NewCommand(entry);
  const task::TaskInfo& info = c->task->info();
  const bool predict = which == Command::kPredict;
  const task::SplitKind kind = predict ? info.predict_split : task::SplitKind::kValidation;
  CLI::App* cmd = parent->add_subcommand(predict ? "predict" : "evaluate",
                                         predict ? info.predict_help : info.evaluate_help);
  AddModelOptions(cmd, *c);
  task::Args& a = c->args;
  if (kind == task::SplitKind::kValidation) {
    cmd->add_option(Flag("validation_file"), a.validation_file, "the file to predict and score")
        ->required();
    cmd->add_flag(Flag("do_eval"), a.do_eval, "accepted for run_*.py's command lines");
  } else {
    cmd->add_option(Flag("test_file", *c->task), a.test_file, "the file to predict")->required();
    cmd->add_flag(Flag("do_predict"), a.do_predict, "accepted for run_*.py's command lines");
    cmd->add_option(Flag("max_predict_samples"), a.max_predict_samples,
                    "use only the first N test examples (0: all)")
        ->check(CLI::Range(0, 1 << 30));
  }
  AddTaskOptions(cmd, *c, which);
  cmd->callback([c, which, kind] { RunTaskPredict(*c, which, kind); });
}

void AddExtra(CLI::App* parent, task::Extra extra) {
  CLI::App* cmd = parent->add_subcommand(extra.name, extra.help);
  for (const task::Option& o : extra.options) AddOption(cmd, o);
  cmd->callback(extra.run);
}

}  // namespace

void AddTaskCommands(CLI::App& app, const std::string& command_line) {
  for (const task::TaskEntry& entry : task::Tasks()) {
    // The task object behind the extras lives as long as the app (its options point into it).
    static std::vector<std::unique_ptr<task::Task>> extras_owners;
    const std::unique_ptr<task::Task>& t = extras_owners.emplace_back(entry.make());
    CLI::App* cmd = app.add_subcommand(entry.name, t->info().help);
    cmd->require_subcommand(1);
    AddTrain(cmd, entry, command_line);
    AddPredict(cmd, entry, Command::kPredict);
    if (*t->info().evaluate_help != '\0') AddPredict(cmd, entry, Command::kEvaluate);
    for (task::Extra& e : t->Extras()) AddExtra(cmd, std::move(e));
  }
}

}  // namespace cputrain::cli
