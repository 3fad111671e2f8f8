// `cputrain-numa plan`: a fine-tune's memory per NUMA node from the model's config.json (or a
// preset) and the task commands' flags, before any weight is read or downloaded, like
// `accelerate estimate-memory`; exit 2 with the figures and the fixes when it cannot fit here.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>

#include "alloc/numa_alloc.h"
#include "cli/commands.h"
#include "common/error.h"
#include "common/log.h"
#include "model/hf.h"
#include "model/presets.h"
#include "topology/placement.h"
#include "topology/topology.h"
#include "train/memory_plan.h"
#include "train/trainer.h"

namespace cputrain::cli {
namespace {

struct PlanOptions {
  CommonOptions common;
  std::string model_dir, preset;
  int batch = 8, seq_len = 128, lora_r = 0, save_steps = 500;
  double lora_alpha = 16;
  std::string lora_targets;
  bool bf16 = false, checkpoint = false;
};

// 8030261248 -> "8,030,261,248".
std::string Grouped(std::uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

model::Shape PlanShape(const PlanOptions& o) {
  if (!o.preset.empty()) {
    const model::Preset* p = model::FindPreset(o.preset);
    if (!p) {
      throw InputError(fmt::format("--model '{}' is not a preset", o.preset),
                       "one of: " + model::PresetNames());
    }
    return p->shape;
  }
  if (!model::IsHfDir(o.model_dir)) {
    throw InputError(
        fmt::format("--model_name_or_path '{}' is not a directory with a config.json", o.model_dir),
        "give a Hugging Face model directory (its config.json is enough: no weights are read)");
  }
  return model::ReadHfShape(o.model_dir, std::nullopt, /*need_weights=*/false);
}

void RunPlan(const PlanOptions& o) {
  if (o.model_dir.empty() == o.preset.empty()) {
    throw InputError("plan needs exactly one of --model_name_or_path and --model",
                     "--model_name_or_path DIR (a config.json) or --model PRESET");
  }
  const model::Shape shape = PlanShape(o);
  if (o.seq_len > shape.maxT) {
    throw InputError(fmt::format("--max_seq_length {} is longer than the model's {} positions",
                                 o.seq_len, shape.maxT),
                     fmt::format("--max_seq_length {} or less", shape.maxT));
  }
  // The LoRA flags go in as the train.lora keys they stand for, as in the task commands.
  CommonOptions common = o.common;
  if (o.lora_r > 0) {
    common.sets.push_back(fmt::format("train.lora.r={}", o.lora_r));
    common.sets.push_back(fmt::format("train.lora.alpha={:.17g}", o.lora_alpha));
    if (!o.lora_targets.empty())
      common.sets.push_back("train.lora.target_modules=" + o.lora_targets);
  }
  Config cfg = common.Load();
  cfg.train.bf16 = o.bf16;
  cfg.train.gradient_checkpointing = cfg.train.gradient_checkpointing || o.checkpoint;
  cfg.train.checkpoint_every = o.save_steps;
  const topo::Topology t = topo::LoadTopology(cfg.topology);
  const topo::Plan plan = topo::PlanPlacement(t, cfg.placement, std::getenv("OMP_NUM_THREADS"));
  const train::MemoryRun run = train::MemoryRunOf(cfg, shape, o.batch, o.seq_len, true);
  const std::vector<train::NodeMemory> nodes = train::PlanMemory(plan, run);
  const std::function<std::uint64_t(int)> available =
      t.simulated ? std::function<std::uint64_t(int)>() : alloc::AvailableOnNode;
  std::printf(
      "%s: %s, %s parameters; %s, %d row(s) x %d positions per group, %zu group(s)%s%s\n",
      o.preset.empty() ? o.model_dir.c_str() : o.preset.c_str(), shape.ToString().c_str(),
      Grouped(shape.ParamCount()).c_str(),
      run.lora && run.lora->on() ? fmt::format("LoRA r={}", o.lora_r).c_str() : "full fine-tune",
      o.batch, o.seq_len, plan.groups.size(), o.bf16 ? ", bf16 products" : "",
      run.checkpoint ? ", gradient checkpointing" : "");
  std::printf("%s\n", train::DescribeMemory(nodes, available).c_str());
  if (t.simulated) std::printf("not checked against this machine: the topology is simulated\n");
  std::fflush(stdout);
  train::Names names;
  names.keys = {{"data.batch_size", "--per_device_train_batch_size"},
                {"data.seq_len", "--max_seq_length"},
                {"train.lora.r", "--lora_r"},
                {"train.gradient_checkpointing", "--gradient_checkpointing"}};
  train::CheckMemoryFits(nodes, available, train::MemoryFixes(run, names));
  std::printf("fits: every node can hold its plan\n");
}

}  // namespace

void AddPlanCommand(CLI::App& app) {
  auto o = std::make_shared<PlanOptions>();
  CLI::App* cmd = app.add_subcommand(
      "plan",
      "A fine-tune's memory per NUMA node, from the model's config.json alone (no weights read) "
      "and the task commands' flags; exit 2 if it cannot fit on this machine");
  o->common.AddTo(cmd);
  cmd->add_option("--model_name_or_path", o->model_dir,
                  "a Hugging Face model directory: its config.json is read, nothing else");
  cmd->add_option("--model", o->preset, "or a preset: " + model::PresetNames());
  cmd->add_option("--per_device_train_batch_size", o->batch,
                  "sequences per replica group in each micro-batch")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--max_seq_length", o->seq_len, "positions per sequence")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--lora_r", o->lora_r, "a LoRA adapter of this rank (0: a full fine-tune)")
      ->check(CLI::Range(0, 4096));
  cmd->add_option("--lora_alpha", o->lora_alpha, "LoRA alpha")->check(FiniteRange(1e-6, 1e6));
  cmd->add_option("--lora_target_modules", o->lora_targets,
                  "modules to adapt, comma-separated PEFT names (default: the family's)");
  cmd->add_flag("--bf16", o->bf16, "bf16 products (train.precision: bf16): the bf16 copies");
  cmd->add_flag("--gradient_checkpointing", o->checkpoint,
                "recompute each block in the backward: one layer's activations and each block's "
                "input instead of every layer's (train.gradient_checkpointing)");
  cmd->add_option("--save_steps", o->save_steps,
                  "checkpoint every N steps (the background save's snapshot; 0: at the end only)")
      ->check(CLI::Range(0, 1 << 30));
  cmd->callback([o] { RunPlan(*o); });
}

}  // namespace cputrain::cli
