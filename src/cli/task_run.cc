// The task commands' runs (task_run.h; the steps are task_command.h's): every input read and
// checked first, then the config, the Trainer's steps and schedule, Train() on the task's rows,
// the output_dir run_*.py leaves, and the predicted splits.
#include "cli/task_run.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "cli/signals.h"
#include "cli/train_job.h"
#include "common/error.h"
#include "common/files.h"
#include "common/log.h"
#include "common/stop.h"
#include "kernels/kernels.h"
#include "model/checkpoint.h"
#include "model/checkpoint_path.h"
#include "model/family.h"
#include "model/hf.h"
#include "model/peft.h"
#include "mpi/bridge.h"
#include "runtime/worker_pool.h"
#include "task/task_rows.h"
#include "topology/binding.h"
#include "topology/placement.h"
#include "topology/topology.h"
#include "train/reports.h"
#include "train/run_lock.h"
#include "train/trainer.h"

namespace cputrain::cli {
namespace {

namespace fs = std::filesystem;
using task::Args;
using task::Command;
using task::SplitKind;

// Everything a command reads before it does any work: the model's shape with the task's head and
// the split of each file it will read (null where it reads none).
struct Inputs {
  model::Shape shape;
  model::HeadSpec head;
  std::array<std::unique_ptr<task::Split>, 3> splits;
  const task::Split* split(SplitKind k) const { return splits[static_cast<int>(k)].get(); }
};

std::string TokenizerPath(const Args& a) {
  // A run's output_dir holds the tokenizer's files beside the exported model; a checkpoint
  // directory inside it does not.
  return a.tokenizer.empty() ? a.model : a.tokenizer;
}

// --model_name_or_path read with `head`: it exists, and fits the task.
model::Shape ModelShape(const TaskCommand& c, const model::HeadSpec& head) {
  const Args& a = c.args;
  std::error_code ec;
  if (!fs::exists(a.model, ec)) {
    throw InputError(fmt::format("--model_name_or_path '{}' does not exist", a.model),
                     "give a local Hugging Face model directory (config.json, model.safetensors; "
                     "nothing is downloaded), or a run's --output_dir");
  }
  const model::Shape s = model::ReadCheckpointShape(model::ResolveModelFile(a.model), head);
  c.task->CheckModel(s, a);
  if (a.max_seq_length > s.maxT) {
    const std::string alias = c.task->FlagAlias("max_seq_length");  // sft's --max_length
    const std::string flag = "--" + (alias.empty() ? std::string("max_seq_length") : alias);
    throw InputError(fmt::format("{} {} is larger than the model's max_position_embeddings ({})",
                                 flag, a.max_seq_length, s.maxT),
                     fmt::format("lower {} to {} or less", flag, s.maxT));
  }
  return s;
}

// An --output_dir whose newest checkpoint is another model's is refused before anything is read
// or written (its resume would refuse it only after the tokenizing, naming train's keys): the
// first config.json key that differs names the other model.
void CheckOutputDir(const Args& a, const model::Shape& s, const model::HeadSpec& head) {
  const std::optional<std::string> ckpt = model::LatestCheckpoint(a.output_dir);
  if (!ckpt) return;
  model::Shape was;
  try {
    was = model::ReadCheckpointShape(model::ResolveModelFile(*ckpt), head);
  } catch (const InputError&) {
    return;  // a damaged checkpoint or an adapter: the resume reports it (or falls back past it)
  }
  if (was == s) return;
  std::string key = "shape", was_is = was.ToString(), now_is = s.ToString();
  for (const auto& [name, then, now] :
       {std::tuple{"model_type", static_cast<int>(was.arch), static_cast<int>(s.arch)},
        std::tuple{"hidden_size", was.C, s.C}, std::tuple{"num_hidden_layers", was.L, s.L},
        std::tuple{"num_attention_heads", was.NH, s.NH},
        std::tuple{"intermediate_size", was.ffn(), s.ffn()}, std::tuple{"vocab_size", was.V, s.V},
        std::tuple{"type_vocab_size", was.types, s.types},
        std::tuple{"max_position_embeddings", was.maxT, s.maxT},
        std::tuple{"num_labels", was.labels, s.labels}}) {
    if (then == now) continue;
    const bool arch = std::string(name) == "model_type";
    key = name;
    was_is = arch ? model::FamilyOf(was.arch).hf_model_type : std::to_string(then);
    now_is = arch ? model::FamilyOf(s.arch).hf_model_type : std::to_string(now);
    break;
  }
  throw InputError(fmt::format("--output_dir '{}' holds a run of another model: its checkpoint "
                               "{} has {} {}, --model_name_or_path '{}' has {}",
                               a.output_dir, *ckpt, key, was_is, a.model, now_is),
                   "pass another --output_dir to start a new run, or the model that run trained "
                   "to resume it (or --overwrite_output_dir to replace the run)");
}

// An --output_dir another run is training into is refused before anything is read, by its flag:
// the trainer's own lock named it train.out_dir, and only after the tokenizing (issue 43). Under
// mpirun only rank 0 takes the lock, later; the ranks here do not know theirs, so the trainer's
// lock is the check there.
void CheckNotInUse(const Args& a) {
  if (mpi::LaunchedByMpi()) return;
  if (const std::optional<std::string> pid = train::RunLock::Holder(a.output_dir)) {
    throw InputError(
        fmt::format("--output_dir '{}' is in use by another run (pid {})", a.output_dir, *pid),
        "wait for that run to end, stop it, or choose another --output_dir");
  }
}

// Step 2 of task_command.h: the model, the tokenizer and every file `kinds` names, read and
// checked; the head the task then trains or predicts with.
Inputs ReadInputs(TaskCommand& c, Command command, const std::vector<SplitKind>& kinds) {
  const Args& a = c.args;
  if (command == Command::kTrain) CheckNotInUse(a);
  Inputs in;
  const model::Shape body = ModelShape(c, c.task->ModelHead());
  c.task->OpenTokenizer(a);
  for (SplitKind k : kinds) in.splits[static_cast<int>(k)] = c.task->Read(k, a);
  in.head = c.task->Head(body, command);
  in.shape = ModelShape(c, in.head);
  if (command == Command::kTrain && !a.overwrite_output_dir) {
    CheckOutputDir(a, in.shape, in.head);
  }
  return in;
}

// The replica groups the placement plans here: a batch is per_device_*_batch_size features per
// group, as each of run_*.py's processes (one per socket) takes its per-device batch.
int PlannedGroups(const Config& cfg) {
  const topo::Topology t = topo::LoadTopology(cfg.topology);
  return static_cast<int>(
      topo::PlanPlacement(t, cfg.placement, std::getenv("OMP_NUM_THREADS")).groups.size());
}

// The config for the model, the data shape and the precision, shared by train and predict.
// The LoRA flags go in as the train.lora keys they stand for (the config's parsing and checks).
// --optim and --optim_args as the config's optim.* settings: HF's Trainer makes Adafactor with
// scale_parameter and relative_step off (the schedule's lr); --optim_args may turn them on.
std::vector<std::string> OptimSets(const Args& a) {
  const bool ada = a.optim == "adafactor", sgd = a.optim == "sgd";
  std::vector<std::string> sets = {fmt::format("optim.name={}", ada   ? "adafactor"
                                                                : sgd ? "sgd"
                                                                      : "adamw")};
  if (ada) {
    sets.push_back("optim.adafactor.scale_parameter=false");
    sets.push_back("optim.adafactor.relative_step=false");
  }
  const std::vector<std::string> known =
      ada   ? std::vector<std::string>{"scale_parameter",
                                       "relative_step",
                                       "warmup_init",
                                       "decay_rate",
                                       "clip_threshold",
                                       "beta1",
                                       "eps1",
                                       "eps2"}
      : sgd ? std::vector<std::string>{"momentum", "dampening", "nesterov"}
            : std::vector<std::string>{};
  std::stringstream in(a.optim_args);
  for (std::string item; std::getline(in, item, ',');) {
    item.erase(std::remove_if(item.begin(), item.end(), ::isspace), item.end());
    if (item.empty()) continue;
    const std::size_t eq = item.find('=');
    const std::string key = item.substr(0, std::min(eq, item.size()));
    if (eq == std::string::npos || std::find(known.begin(), known.end(), key) == known.end()) {
      throw InputError(
          fmt::format(
              "--optim_args '{}': '{}' is not a key=value setting of --optim {}{}", a.optim_args,
              item, a.optim,
              known.empty() ? " (it has none)" : fmt::format(" ({})", fmt::join(known, ", "))),
          "give --optim_args as key=value,key=value with the settings of the chosen --optim");
    }
    sets.push_back(fmt::format("optim.{}{}={}", ada ? "adafactor." : "", key, item.substr(eq + 1)));
  }
  return sets;
}

Config BaseConfig(const TaskCommand& c, const std::string& init_from, const std::string& adapter,
                  const model::HeadSpec& head) {
  const Args& a = c.args;
  CommonOptions common = c.common;
  if (a.lora_r > 0) {
    common.sets.push_back(fmt::format("train.lora.r={}", a.lora_r));
    common.sets.push_back(fmt::format("train.lora.alpha={:.17g}", a.lora_alpha));
    common.sets.push_back(fmt::format("train.lora.dropout={:.17g}", a.lora_dropout));
    if (!a.lora_targets.empty())
      common.sets.push_back("train.lora.target_modules=" + a.lora_targets);
  }
  if (!adapter.empty()) common.sets.push_back("train.lora.adapter=" + adapter);
  for (std::string& s : OptimSets(a)) common.sets.push_back(std::move(s));
  if (a.resume_fallback) common.sets.push_back("train.resume_fallback=true");
  if (!a.report_to.empty()) common.sets.push_back("train.report_to=" + a.report_to);
  Config cfg = common.Load();
  cfg.model.init_from = init_from;
  cfg.model.head = model::HeadName(head.head);
  cfg.model.num_labels = head.labels;
  cfg.model.problem_type = head.problem ? model::ProblemName(*head.problem) : "";
  cfg.model.pad_token_id = head.pad_token;
  cfg.model.seed = a.seed;
  cfg.data.train.clear();
  cfg.data.val.clear();
  cfg.data.seq_len = a.max_seq_length;
  cfg.data.batch_size = 1;
  cfg.train.bf16 = a.bf16;
  cfg.train.gradient_checkpointing = cfg.train.gradient_checkpointing || a.gradient_checkpointing;
  cfg.train.out_dir = a.output_dir;
  return cfg;
}

// How train's messages name what a task command's flags set (issue 32, item 8).
train::Names TaskNames() {
  train::Names n;
  n.keys = {{"data.train", "--train_file"},
            {"data.seq_len", "--max_seq_length"},
            {"data.batch_size",
             "the global batch (--per_device_train_batch_size x replica groups x processes)"},
            {"data.seed", "--seed"},
            {"data.shuffle", "the shuffled feature order"},
            {"model.init_from", "--model_name_or_path"},
            {"model.layers", "the model's num_hidden_layers (--model_name_or_path)"},
            {"model.channels", "the model's hidden_size (--model_name_or_path)"},
            {"model.heads", "the model's num_attention_heads (--model_name_or_path)"},
            {"model.vocab_size", "the model's vocab_size (--model_name_or_path)"},
            {"model.max_seq_len", "the model's max_position_embeddings (--model_name_or_path)"},
            {"train.resume_fallback", "--resume-fallback"},
            {"train.lora", "--lora_r / --lora_alpha / --lora_target_modules"},
            {"train.lora.r", "--lora_r"},
            {"train.gradient_checkpointing", "--gradient_checkpointing"}};
  n.fresh_start = "start a new run: another --output_dir, or --overwrite_output_dir";
  return n;
}

// The Trainer's step count and schedule from the flags: update steps an epoch = micro-batches //
// accumulation (at least 1), times the epochs rounded up; --max_steps replaces it; a linear
// schedule with --warmup_steps, else ceil(steps x --warmup_ratio); the optimizer with clipping.
void SetSchedule(const Args& a, std::size_t rows, Config& cfg) {
  const int B = cfg.data.batch_size;
  const std::size_t windows = (rows + B - 1) / B;
  const std::size_t per_epoch = std::max<std::size_t>(windows / a.accum, 1);
  const long long steps =
      a.max_steps > 0 ? a.max_steps : static_cast<long long>(std::ceil(a.epochs * per_epoch));
  if (steps < 1 || steps > (1 << 30)) {
    throw InputError(fmt::format("{} training steps ({} features, batch {}, {} epochs)", steps,
                                 rows, B, a.epochs),
                     "set --num_train_epochs or --max_steps to a positive number");
  }
  cfg.data.shuffle = true;
  cfg.data.seed = a.seed;
  cfg.train.grad_accum_steps = a.accum;
  cfg.train.batch_tokens = 0;
  cfg.train.steps = static_cast<int>(steps);
  cfg.train.checkpoint_every = a.save_steps;
  cfg.train.eval_every = 0;
  OptimConfig& o = cfg.optim;
  o.lr = a.lr;
  o.min_lr = 0;
  o.schedule = Schedule::kLinear;
  o.warmup_steps = a.warmup_steps > 0
                       ? a.warmup_steps
                       : static_cast<int>(std::ceil(static_cast<double>(steps) * a.warmup_ratio));
  o.beta1 = a.beta1;
  o.beta2 = a.beta2;
  o.eps = a.adam_eps;
  o.weight_decay = a.weight_decay;
  o.grad_clip = a.max_grad_norm;
  if (o.warmup_steps >= cfg.train.steps) {
    throw InputError(fmt::format("{} warmup steps of {} steps", o.warmup_steps, cfg.train.steps),
                     "lower --warmup_ratio / --warmup_steps");
  }
}

// Copies the tokenizer's files into dir, so that the output directory loads with
// AutoTokenizer.from_pretrained as run_*.py's does.
void CopyTokenizer(const std::string& tokenizer, const std::string& dir) {
  std::error_code ec;
  std::vector<fs::path> files;
  if (fs::is_directory(tokenizer, ec)) {
    for (const char* name : {"vocab.txt", "tokenizer.json", "tokenizer_config.json",
                             "special_tokens_map.json", "chat_template.jinja"}) {
      if (fs::is_regular_file(fs::path(tokenizer) / name, ec)) {
        files.push_back(fs::path(tokenizer) / name);
      }
    }
  } else {
    files.push_back(tokenizer);
  }
  for (const fs::path& f : files) {
    const fs::path to = fs::path(dir) / f.filename();
    if (fs::exists(to, ec) && fs::equivalent(f, to, ec)) continue;
    WriteFileAtomic(to.string(),
                    ReadFile(f.string(), InputKind{"tokenizer file", "a tokenizer file", 1ull << 30,
                                                   "pass --tokenizer_name"}));
  }
}

// The task's additions to config.json in dir (classification's label names), if it has any.
void AnnotateConfig(const task::Task& t, const std::string& dir) {
  const std::string path = (fs::path(dir) / model::kHfConfigFile).string();
  const nlohmann::json was =
      nlohmann::json::parse(ReadFile(path, InputKind{"Hugging Face config", "a config.json file",
                                                     1ull << 24, "rerun the command"}));
  nlohmann::json now = was;
  t.AnnotateConfig(now);
  if (now != was) WriteFileAtomic(path, now.dump(2) + "\n");
}

void Print(const std::string& s) {
  if (s.empty()) return;
  if (std::fwrite(s.data(), 1, s.size(), stdout) != s.size() || std::fflush(stdout) != 0) {
    throw RuntimeError("writing to stdout failed");
  }
}

// The logits of every row of `split` (one process; prediction is cheap beside training).
task::Logits InferLogits(const TaskCommand& c, const task::Split& split, Config cfg,
                         const model::Shape& shape) {
  const int G = PlannedGroups(cfg);
  cfg.data.batch_size = c.args.eval_batch * G;
  task::TaskRows rows(split, cfg.data.batch_size, cfg.data.seq_len, /*shuffle=*/false, 0);
  task::Logits out;
  const bool per_row = shape.head == model::Head::kClassify;
  const bool stream = c.task->streams_logits();  // scored row by row, none kept
  out.width = static_cast<std::size_t>(shape.head_width()) *
              (per_row ? 1 : static_cast<std::size_t>(cfg.data.seq_len));
  if (!stream) out.values.assign(split.rows() * out.width, 0.f);
  log::Info("predicting {} {} of {} examples, {} per batch", split.rows(), split.unit(),
            split.examples(), cfg.data.batch_size);
  train::Infer(cfg, rows, [&](std::size_t j, int r, const float* logits) {
    const std::size_t s = j * static_cast<std::size_t>(cfg.data.batch_size) + r;
    if (s >= split.rows()) return;  // a repeat that filled the last batch
    const int T = rows.Positions(0) > 0 ? rows.Positions(0) : cfg.data.seq_len;
    if (stream) return c.task->OnLogits(split, s, j, logits, T);
    const std::size_t n = per_row ? out.width : static_cast<std::size_t>(T) * shape.head_width();
    std::copy(logits, logits + n, out.values.begin() + static_cast<std::ptrdiff_t>(s * out.width));
  });
  return out;
}

// A generating task's prediction (sft): the model `init_from` with the adapter merged, on the
// first planned group's CPUs, handed to the task with `split`'s prompts.
task::Outcome GenerateSplit(const TaskCommand& c, const task::Split& split, const Config& cfg,
                            const std::string& init_from, const std::string& adapter) {
  kernels::InitBlas();
  const std::string file = model::ResolveModelFile(init_from);
  const model::ParamLayout layout(model::ReadCheckpointShape(file));
  std::vector<float> params(layout.total());
  model::LoadCheckpoint(file, layout, params.data());
  const topo::Topology t = topo::LoadTopology(cfg.topology);
  const topo::Plan plan = topo::PlanPlacement(t, cfg.placement, std::getenv("OMP_NUM_THREADS"));
  auto binder = topo::MakeBinder(t);
  WorkerPool pool(plan.groups[0].cpus, binder.get(), "gen");
  if (!adapter.empty()) model::MergeAdapter(pool, adapter, layout, params.data());
  log::Info("generating completions of {} {} with {} worker(s)", split.rows(), split.unit(),
            pool.size());
  return c.task->Generate(split, task::GenerationModel{pool, layout, params.data()}, c.args);
}

// Predicts `split` with the model `init_from` (+ adapter) and writes the task's files; for the
// validation file also eval_results.json (the Trainer's: the metrics prefixed with eval_, the
// epoch when training ran, the features predicted). Prints what the task prints. Returns
// eval_results.json's contents (empty if none was written).
nlohmann::ordered_json PredictSplit(const TaskCommand& c, SplitKind kind, const task::Split& split,
                                    const std::string& init_from, const std::string& adapter,
                                    const model::Shape& shape, const model::HeadSpec& head,
                                    double epoch) {
  const Config cfg = BaseConfig(c, init_from, adapter, head);
  if (c.task->generates() && kind == c.task->info().predict_split) {
    MakeDirs(c.args.output_dir);
    Print(GenerateSplit(c, split, cfg, init_from, adapter).printed);
    return {};  // completions, no metrics
  }
  const task::Logits logits = InferLogits(c, split, cfg, shape);
  MakeDirs(c.args.output_dir);
  const task::Outcome o = c.task->Finish(kind, split, logits, c.args);
  nlohmann::ordered_json r;
  if (kind == SplitKind::kValidation && !o.metrics.empty()) {
    if (epoch >= 0) r["epoch"] = epoch;
    bool samples = false;
    for (const auto& [name, value] : o.metrics) {
      r["eval_" + name] = value;
      samples = samples || name == "samples";
    }
    if (!samples) r["eval_samples"] = split.rows();
    WriteFileAtomic((fs::path(c.args.output_dir) / "eval_results.json").string(), r.dump(4) + "\n");
  }
  Print(o.printed);
  return r;
}

// The evaluation after training (eval_results.json's eval_* numbers but eval_samples, which
// run_*.py adds after the Trainer logged the rest) beside the run's own rows at its last step:
// metrics.jsonl, trainer_state.json and, with --report_to tensorboard, the event file.
void ReportEval(const Config& cfg, int step, const nlohmann::ordered_json& results) {
  nlohmann::json metrics = nlohmann::json::object();
  for (const auto& [key, value] : results.items())
    if (key.rfind("eval_", 0) == 0 && key != "eval_samples" && value.is_number()) {
      metrics[key] = value;
    }
  if (!metrics.empty()) train::ReportEvalMetrics(cfg, step, metrics);
}

// The splits a train run reads: the training file, and those it predicts after training.
std::vector<SplitKind> TrainSplits(const Args& a) {
  std::vector<SplitKind> kinds = {SplitKind::kTrain};
  if (a.do_eval) kinds.push_back(SplitKind::kValidation);
  if (a.do_predict) kinds.push_back(SplitKind::kTest);
  return kinds;
}

// After training (rank 0): the output_dir as run_*.py leaves it — the trained model as an HF
// directory, or a LoRA run's adapter as PEFT's Trainer saves it, with the tokenizer. Returns
// what prediction loads: {init_from, adapter}.
std::pair<std::string, std::string> SaveOutputs(const TaskCommand& c, const Config& cfg) {
  const Args& a = c.args;
  const std::string step = model::ResolveCheckpointDir(a.output_dir);
  if (cfg.train.lora.on()) {
    for (const char* name : {model::kAdapterConfigFile, model::kAdapterFile}) {
      WriteFileAtomic(
          (fs::path(a.output_dir) / name).string(),
          ReadFile((fs::path(step) / name).string(),
                   InputKind{"adapter file", "an adapter file", 1ull << 40, "rerun the command"}));
    }
    CopyTokenizer(TokenizerPath(a), a.output_dir);
    log::Info("saved the trained LoRA adapter (PEFT format) in {}", a.output_dir);
    return {a.model, step};
  }
  // The run's newest checkpoint (not the HF files an earlier finish exported beside it).
  const std::string trained = model::ResolveModelFile(step);
  const model::ParamLayout layout(model::ReadCheckpointShape(trained));
  std::vector<float> params(layout.total());
  model::LoadCheckpoint(trained, layout, params.data());
  model::ExportHf(a.output_dir, layout, params.data());
  CopyTokenizer(TokenizerPath(a), a.output_dir);
  AnnotateConfig(*c.task, a.output_dir);
  const nlohmann::json cfg_json = nlohmann::json::parse(model::HfConfigJson(layout.shape()));
  log::Info("saved the trained model as a Hugging Face directory: {} ({})", a.output_dir,
            cfg_json.value("architectures", nlohmann::json::array({""}))[0].get<std::string>());
  return {trained, ""};
}

void CheckTrainFlags(const TaskCommand& c) {
  const Args& a = c.args;
  for (const auto& [on, kind, what] :
       {std::tuple{a.do_eval, SplitKind::kValidation, "--do_eval"},
        std::tuple{a.do_predict, SplitKind::kTest, "--do_predict"}}) {
    if (on && a.File(kind).empty()) {
      throw InputError(fmt::format("{} needs {}", what, task::FileFlag(kind)),
                       fmt::format("pass the file to predict with {}", task::FileFlag(kind)));
    }
  }
  c.task->CheckFlags(a, Command::kTrain);
  if (c.use_ipex || !c.ddp_backend.empty()) {
    log::Info(
        "--use_ipex / --ddp_backend are run_*.py's; here placement and the collectives "
        "are the engine's own");
  }
}

}  // namespace

void RunTaskTrain(TaskCommand& c, const std::string& command_line) {
  StopToken stop;
  StopOnSignals on_signals(stop);
  const Args& a = c.args;
  CheckTrainFlags(c);
  const Inputs in = ReadInputs(c, Command::kTrain, TrainSplits(a));
  const task::Split& train = *in.split(SplitKind::kTrain);

  Config cfg = BaseConfig(c, a.model, a.adapter, in.head);
  std::unique_ptr<mpi::Bridge> bridge =
      mpi::Bridge::Start(cfg.mpi, [](int exit_code) { std::_Exit(exit_code); });
  const int R = bridge ? bridge->size() : 1, G = PlannedGroups(cfg);
  const int B = a.train_batch * G * R;
  cfg.data.batch_size = B;
  SetSchedule(a, train.rows(), cfg);
  log::Info(
      "{} training {} from {} examples; global batch {} ({} per group x {} groups x {} "
      "processes), {} steps ({} epochs)",
      train.rows(), train.unit(), train.examples(), B, a.train_batch, G, R, cfg.train.steps,
      a.epochs);

  train::TrainOptions to;
  to.progress = ProgressFromFlag(a.progress);
  to.stop = &stop;
  to.names = TaskNames();
  to.overwrite = a.overwrite_output_dir;
  to.train_rows = [&](const model::Shape&, int batch, int T) {
    return std::make_unique<task::TaskRows>(train, batch, T, /*shuffle=*/true, a.seed);
  };
  const bool rank0 = !bridge || bridge->rank() == 0;
  const train::TrainResult r = TrainAsJob(
      cfg, to, bridge.get(),
      cfg.train.resume == "auto" ? command_line : command_line + " --set train.resume=auto");
  if (!rank0) return;
  const auto [init_from, adapter] = SaveOutputs(c, cfg);
  const double epoch = static_cast<double>(r.last_step) * B * a.accum / train.rows();
  for (SplitKind k : {SplitKind::kValidation, SplitKind::kTest}) {
    if (const task::Split* s = in.split(k)) {
      ReportEval(cfg, r.last_step,
                 PredictSplit(c, k, *s, init_from, adapter, in.shape, in.head, epoch));
    }
  }
}

void RunTaskPredict(TaskCommand& c, Command command, SplitKind kind) {
  c.task->CheckFlags(c.args, command);
  const Inputs in = ReadInputs(c, command, {kind});
  PredictSplit(c, kind, *in.split(kind), c.args.model, c.args.adapter, in.shape, in.head, -1);
}

}  // namespace cputrain::cli
