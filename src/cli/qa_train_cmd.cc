// `cputrain-numa qa train` and `qa predict`: Hugging Face's run_qa.py job on the engine
// (docs/question-answering.md). The flags are run_qa.py's and the Trainer's (dashes or
// underscores); they become config keys (the YAML and --set still set the placement and anything
// else), the features become the rows Train() trains on (task/squad_rows.h), and the outputs are
// run_qa.py's: an HF directory in --output_dir (config.json, model.safetensors, the tokenizer's
// files), predictions.json, nbest_predictions.json (null_odds.json for v2.0) and
// eval_results.json, beside the run's own files (metrics.jsonl, checkpoints/, placement.json).
#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "cli/commands.h"
#include "cli/signals.h"
#include "cli/train_job.h"
#include "common/error.h"
#include "common/files.h"
#include "common/log.h"
#include "common/stop.h"
#include "data/tokenizer.h"
#include "data/wordpiece.h"
#include "model/checkpoint.h"
#include "model/checkpoint_path.h"
#include "model/family.h"
#include "model/hf.h"
#include "mpi/bridge.h"
#include "task/squad.h"
#include "task/squad_eval.h"
#include "task/squad_features.h"
#include "task/squad_rows.h"
#include "topology/placement.h"
#include "topology/topology.h"
#include "train/reports.h"
#include "train/trainer.h"

namespace cputrain::cli {
namespace {

namespace fs = std::filesystem;

// run_qa.py's and the Trainer's arguments, their defaults (TrainingArguments').
struct QaArgs {
  CommonOptions common;
  std::string model, tokenizer, train_file, validation_file, output_dir, progress = "auto";
  int max_seq_length = 384, doc_stride = 128, train_batch = 8, eval_batch = 8;
  double lr = 5e-5, epochs = 3.0, warmup_ratio = 0, weight_decay = 0;
  double beta1 = 0.9, beta2 = 0.999, adam_eps = 1e-8, max_grad_norm = 1.0;
  int max_steps = -1, warmup_steps = 0, accum = 1, save_steps = 500;
  int max_train_samples = 0, max_eval_samples = 0;
  bool bf16 = false, v2 = false, do_train = false, do_eval = false, resume_fallback = false;
  bool use_ipex = false;
  std::string ddp_backend;
  int n_best = 20, max_answer = 30;
  double null_threshold = 0;
  uint64_t seed = 42;
  // LoRA (docs/lora.md): a PEFT adapter to predict with or to continue training, or a new one.
  std::string adapter, lora_targets;
  std::string report_to;  // the Trainer's: none, tensorboard (train.report_to)
  int lora_r = 0;
  double lora_alpha = 8, lora_dropout = 0;
};

// Both spellings of each flag: run_qa.py's --max_seq_length and the CLI's --max-seq-length.
std::string Flag(const std::string& underscored) {
  std::string dashed = underscored;
  for (char& c : dashed)
    if (c == '_') c = '-';
  return "--" + underscored + (dashed != underscored ? ",--" + dashed : "");
}

void AddModelOptions(CLI::App* cmd, QaArgs& a) {
  a.common.AddTo(cmd);
  cmd->add_option(Flag("model_name_or_path"), a.model,
                  "a local Hugging Face BERT or DistilBERT directory (BertForQuestionAnswering, "
                  "BertModel or a pretraining checkpoint: a new qa head is initialized), or a "
                  "run's output_dir / checkpoint")
      ->required();
  cmd->add_option(Flag("tokenizer_name"), a.tokenizer,
                  "the WordPiece tokenizer: vocab.txt, tokenizer.json or their directory "
                  "(default: --model_name_or_path)");
  cmd->add_option(Flag("output_dir"), a.output_dir, "where the outputs go")->required();
  cmd->add_option(Flag("max_seq_length"), a.max_seq_length,
                  "tokens per feature, question and specials included")
      ->check(CLI::Range(4, 1 << 16));
  cmd->add_option(Flag("doc_stride"), a.doc_stride,
                  "context tokens shared by consecutive windows of a long context")
      ->check(CLI::Range(0, 1 << 16));
  cmd->add_option(Flag("per_device_eval_batch_size"), a.eval_batch,
                  "features per replica group in each prediction batch")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_flag(Flag("bf16"), a.bf16,
                "bf16 products with fp32 master weights (train.precision: bf16; needs "
                "AVX512_BF16)");
  cmd->add_flag(Flag("version_2_with_negative"), a.v2,
                "SQuAD v2.0: unanswerable questions; the null answer wins past the threshold");
  cmd->add_option(Flag("n_best_size"), a.n_best, "answers kept per example in the n-best list")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option(Flag("max_answer_length"), a.max_answer, "the longest answer, in tokens")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option(Flag("null_score_diff_threshold"), a.null_threshold,
                  "v2.0: predict no answer when null score - best score exceeds this")
      ->check(FiniteRange(-1e30, 1e30));
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

std::string TokenizerPath(const QaArgs& a) {
  if (!a.tokenizer.empty()) return a.tokenizer;
  // A run's output_dir holds the tokenizer's files beside the exported model; a checkpoint
  // directory inside it does not.
  return a.model;
}

// The examples of a file, the first `limit` if limit > 0 (run_qa.py's max_*_samples counts
// examples). flag: the option that named the file, for messages.
task::SquadData Read(const std::string& flag, const std::string& path, int limit) {
  task::SquadData d;
  try {
    d = task::ReadSquad(path);
  } catch (const InputError& e) {
    // ReadSquad's hints name qa features' and qa evaluate's --data; here the file came from flag.
    std::string hint = e.hint();
    if (const std::size_t at = hint.find("--data"); at != std::string::npos) {
      hint.replace(at, 6, flag);
    }
    throw InputError(e.what(), hint);
  }
  if (limit > 0 && static_cast<std::size_t>(limit) < d.examples.size()) {
    d.examples.resize(static_cast<std::size_t>(limit));
  }
  log::Info("{}: {} examples ({}; {} unanswerable)", path, d.examples.size(), d.layout,
            d.unanswerable);
  return d;
}

// The tokenizer of the features: BERT's WordPiece only (the [CLS] question [SEP] context [SEP]
// layout and the offsets are WordPiece's; a BPE tokenizer.json holding [CLS] would make
// features the model was never trained on).
std::unique_ptr<data::Tokenizer> QaTokenizer(const QaArgs& a) {
  const std::string path = TokenizerPath(a);
  std::unique_ptr<data::Tokenizer> tok = data::MakeTokenizer(path);
  if (dynamic_cast<const data::WordPieceTokenizer*>(tok.get()) == nullptr) {
    throw InputError(
        fmt::format("tokenizer '{}' ({}) is not WordPiece", path, tok->name()),
        "question answering reads BERT's WordPiece tokenizer: pass --tokenizer_name the "
        "model's vocab.txt, its WordPiece tokenizer.json, or their directory");
  }
  return tok;
}

// The shape of --model_name_or_path's model with a span head, checked before anything is read
// or written: it exists, it is an encoder, its positions hold --max_seq_length; and (train)
// --output_dir holds no run of another model, which its resume would otherwise refuse only
// after the tokenizing, with the shapes but not the option to change.
model::Shape QaModelShape(const QaArgs& a, bool training) {
  std::error_code ec;
  if (!fs::exists(a.model, ec)) {
    throw InputError(fmt::format("--model_name_or_path '{}' does not exist", a.model),
                     "give a local Hugging Face BERT or DistilBERT directory (config.json, "
                     "model.safetensors; nothing is downloaded), or a run's --output_dir");
  }
  const model::Shape s =
      model::ReadCheckpointShape(model::ResolveModelFile(a.model), model::Head::kSpan);
  if (!s.encoder()) {
    throw InputError(fmt::format("--model_name_or_path '{}' is a {} model, a decoder: question "
                                 "answering fine-tunes an encoder",
                                 a.model, model::FamilyOf(s.arch).name),
                     "give a BERT or DistilBERT directory (model_type bert or distilbert)");
  }
  if (a.max_seq_length > s.maxT) {
    throw InputError(fmt::format("--max_seq_length {} is larger than the model's "
                                 "max_position_embeddings ({})",
                                 a.max_seq_length, s.maxT),
                     fmt::format("lower --max_seq_length to {} or less", s.maxT));
  }
  if (!training) return s;
  const std::optional<std::string> ckpt = model::LatestCheckpoint(a.output_dir);
  if (!ckpt) return s;
  model::Shape was;
  try {
    was = model::ReadCheckpointShape(model::ResolveModelFile(*ckpt), model::Head::kSpan);
  } catch (const InputError&) {
    return s;  // a damaged checkpoint: the resume reports it (or falls back past it)
  }
  if (was == s) return s;
  // The first config.json key that differs names the other model; the shapes if none does.
  std::string key = "shape", was_is = was.ToString(), now_is = s.ToString();
  for (const auto& [name, then, now] :
       {std::tuple{"model_type", static_cast<int>(was.arch), static_cast<int>(s.arch)},
        std::tuple{"hidden_size", was.C, s.C}, std::tuple{"num_hidden_layers", was.L, s.L},
        std::tuple{"num_attention_heads", was.NH, s.NH},
        std::tuple{"intermediate_size", was.ffn(), s.ffn()}, std::tuple{"vocab_size", was.V, s.V},
        std::tuple{"type_vocab_size", was.types, s.types},
        std::tuple{"max_position_embeddings", was.maxT, s.maxT}}) {
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
                   "to resume it");
}

// The replica groups the placement plans here: a batch is per_device_*_batch_size features per
// group, as each of run_qa.py's processes (one per socket) takes its per-device batch.
int PlannedGroups(const Config& cfg) {
  const topo::Topology t = topo::LoadTopology(cfg.topology);
  return static_cast<int>(
      topo::PlanPlacement(t, cfg.placement, std::getenv("OMP_NUM_THREADS")).groups.size());
}

// The config for the model, the data shape and the precision, shared by train and predict.
// The LoRA flags go in as the train.lora keys they stand for (the config's parsing and checks).
Config BaseConfig(const QaArgs& a, const std::string& init_from, int batch) {
  CommonOptions common = a.common;
  if (a.lora_r > 0) {
    common.sets.push_back(fmt::format("train.lora.r={}", a.lora_r));
    common.sets.push_back(fmt::format("train.lora.alpha={:.17g}", a.lora_alpha));
    common.sets.push_back(fmt::format("train.lora.dropout={:.17g}", a.lora_dropout));
    if (!a.lora_targets.empty())
      common.sets.push_back("train.lora.target_modules=" + a.lora_targets);
  }
  if (!a.adapter.empty()) common.sets.push_back("train.lora.adapter=" + a.adapter);
  if (!a.report_to.empty()) common.sets.push_back("train.report_to=" + a.report_to);
  Config cfg = common.Load();
  cfg.model.init_from = init_from;
  cfg.model.head = "qa";
  cfg.model.seed = a.seed;
  cfg.data.train.clear();
  cfg.data.val.clear();
  cfg.data.seq_len = a.max_seq_length;
  cfg.data.batch_size = batch;
  cfg.train.bf16 = a.bf16;
  cfg.train.out_dir = a.output_dir;
  return cfg;
}

// Copies the tokenizer's files into dir, so that the output directory loads with
// AutoTokenizer.from_pretrained as run_qa.py's does.
void CopyTokenizer(const std::string& tokenizer, const std::string& dir) {
  std::error_code ec;
  std::vector<fs::path> files;
  if (fs::is_directory(tokenizer, ec)) {
    for (const char* name :
         {"vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}) {
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
                    ReadFile(f.string(), InputKind{"tokenizer file",
                                                   "a tokenizer "
                                                   "file",
                                                   1ull << 30, "pass --tokenizer_name"}));
  }
}

// Predicts every validation example with the model `init_from` and writes run_qa.py's files;
// returns the scores, and eval_results.json's contents in *results.
task::SquadScores Predict(const QaArgs& a, const std::string& init_from, double epoch,
                          nlohmann::json* results = nullptr) {
  const task::SquadData data = Read("--validation_file", a.validation_file, a.max_eval_samples);
  std::unique_ptr<data::Tokenizer> tok = QaTokenizer(a);
  task::FeatureOptions fo;
  fo.max_seq_length = a.max_seq_length;
  fo.doc_stride = a.doc_stride;
  fo.keep_offsets = true;
  const task::QaFeatures f =
      task::MakeQaFeatures(data.examples, *tok, task::BertSpecialIds(*tok), fo);
  Config cfg = BaseConfig(a, init_from, 1);
  const int G = PlannedGroups(cfg);
  cfg.data.batch_size = a.eval_batch * G;
  task::QaRows rows(f, cfg.data.batch_size, /*shuffle=*/false, 0, a.validation_file);
  const std::size_t T = static_cast<std::size_t>(a.max_seq_length);
  std::vector<float> start(f.size() * T), end(f.size() * T);
  log::Info("predicting {} features of {} examples, {} per batch", f.size(), data.examples.size(),
            cfg.data.batch_size);
  train::Infer(cfg, rows, [&](std::size_t j, int r, const float* logits) {
    const std::size_t s = j * static_cast<std::size_t>(cfg.data.batch_size) + r;
    if (s >= f.size()) return;  // a repeat that filled the last batch
    for (std::size_t t = 0; t < T; ++t) {
      start[s * T + t] = logits[2 * t];
      end[s * T + t] = logits[2 * t + 1];
    }
  });
  task::PostprocessOptions po;
  po.version_2_with_negative = a.v2;
  po.n_best_size = a.n_best;
  po.max_answer_length = a.max_answer;
  po.null_score_diff_threshold = static_cast<float>(a.null_threshold);
  const task::QaPredictions p = task::Postprocess(data.examples, f, start.data(), end.data(), po);
  MakeDirs(a.output_dir);
  task::WritePredictions(p, a.output_dir, "", a.v2);
  std::unordered_map<std::string, std::string> answers;
  for (std::size_t i = 0; i < p.ids.size(); ++i) answers[p.ids[i]] = p.answers[i];
  const task::SquadScores s = task::EvaluatePredictions(data.examples, answers, a.v2);
  // The Trainer's eval_results.json: the metric names prefixed with eval_.
  nlohmann::ordered_json r;
  if (epoch >= 0) r["epoch"] = epoch;
  if (a.v2) {
    r["eval_exact"] = s.exact;
    r["eval_f1"] = s.f1;
    r["eval_total"] = s.total;
    if (s.has_ans_total) {
      r["eval_HasAns_exact"] = s.has_ans_exact;
      r["eval_HasAns_f1"] = s.has_ans_f1;
      r["eval_HasAns_total"] = *s.has_ans_total;
    }
    if (s.no_ans_total) {
      r["eval_NoAns_exact"] = s.no_ans_exact;
      r["eval_NoAns_f1"] = s.no_ans_f1;
      r["eval_NoAns_total"] = *s.no_ans_total;
    }
  } else {
    r["eval_exact_match"] = s.exact;
    r["eval_f1"] = s.f1;
  }
  r["eval_samples"] = f.size();
  WriteFileAtomic((fs::path(a.output_dir) / "eval_results.json").string(), r.dump(4) + "\n");
  if (results) *results = r;
  return s;
}

void PrintScores(const task::SquadScores& s) {
  const std::string j = s.ToJson() + "\n";
  if (std::fwrite(j.data(), 1, j.size(), stdout) != j.size() || std::fflush(stdout) != 0) {
    throw RuntimeError("writing to stdout failed");
  }
}

// The evaluation's metrics (eval_results.json's eval_* numbers but eval_samples, which
// run_qa.py adds after the Trainer logged the rest) beside the run's own rows: metrics.jsonl,
// trainer_state.json and, with --report_to tensorboard, the event file.
void ReportEval(const Config& cfg, int step, const nlohmann::json& results) {
  nlohmann::json metrics = nlohmann::json::object();
  for (const auto& [key, value] : results.items())
    if (key.rfind("eval_", 0) == 0 && key != "eval_samples" && value.is_number()) {
      metrics[key] = value;
    }
  train::ReportEvalMetrics(cfg, step, metrics);
}

void RunTrain(const QaArgs& a, const std::string& command_line) {
  StopToken stop;
  StopOnSignals on_signals(stop);
  if (a.use_ipex || !a.ddp_backend.empty()) {
    log::Info(
        "--use_ipex / --ddp_backend are run_qa.py's; here placement and the collectives "
        "are the engine's own (docs/question-answering.md)");
  }
  QaArgs args = a;
  std::vector<std::string> sets = args.common.sets;
  if (args.resume_fallback) args.common.sets.push_back("train.resume_fallback=true");
  QaModelShape(args, /*training=*/true);
  const task::SquadData data = Read("--train_file", args.train_file, args.max_train_samples);
  const std::string tok_path = TokenizerPath(args);
  std::unique_ptr<data::Tokenizer> tok = QaTokenizer(args);
  task::FeatureOptions fo;
  fo.max_seq_length = args.max_seq_length;
  fo.doc_stride = args.doc_stride;
  fo.keep_offsets = false;
  const task::QaFeatures f =
      task::MakeQaFeatures(data.examples, *tok, task::BertSpecialIds(*tok), fo);

  Config cfg = BaseConfig(args, args.model, 1);
  std::unique_ptr<mpi::Bridge> bridge =
      mpi::Bridge::Start(cfg.mpi, [](int exit_code) { std::_Exit(exit_code); });
  const int R = bridge ? bridge->size() : 1, G = PlannedGroups(cfg);
  const int B = args.train_batch * G * R;
  cfg.data.batch_size = B;
  cfg.data.shuffle = true;
  cfg.data.seed = args.seed;
  cfg.train.grad_accum_steps = args.accum;
  cfg.train.batch_tokens = 0;
  // The Trainer's step count: update steps an epoch = micro-batches // accumulation (at least
  // 1), times the epochs rounded up; --max_steps replaces it.
  const std::size_t windows = (f.size() + B - 1) / B;
  const std::size_t per_epoch = std::max<std::size_t>(windows / args.accum, 1);
  const long long steps = args.max_steps > 0
                              ? args.max_steps
                              : static_cast<long long>(std::ceil(args.epochs * per_epoch));
  if (steps < 1 || steps > (1 << 30)) {
    throw InputError(fmt::format("{} training steps ({} features, batch {}, {} epochs)", steps,
                                 f.size(), B, args.epochs),
                     "set --num_train_epochs or --max_steps to a positive number");
  }
  cfg.train.steps = static_cast<int>(steps);
  cfg.train.checkpoint_every = args.save_steps;
  cfg.train.eval_every = 0;
  OptimConfig& o = cfg.optim;
  o.lr = args.lr;
  o.min_lr = 0;
  o.schedule = Schedule::kLinear;
  o.warmup_steps =
      args.warmup_steps > 0
          ? args.warmup_steps
          : static_cast<int>(std::ceil(static_cast<double>(steps) * args.warmup_ratio));
  o.beta1 = args.beta1;
  o.beta2 = args.beta2;
  o.eps = args.adam_eps;
  o.weight_decay = args.weight_decay;
  o.grad_clip = args.max_grad_norm;
  if (o.warmup_steps >= cfg.train.steps) {
    throw InputError(fmt::format("{} warmup steps of {} steps", o.warmup_steps, cfg.train.steps),
                     "lower --warmup_ratio / --warmup_steps");
  }
  log::Info(
      "{} training features from {} examples; global batch {} ({} per group x {} groups x "
      "{} processes), {} steps ({} epochs, {} micro-batches an epoch)",
      f.size(), data.examples.size(), B, args.train_batch, G, R, steps, args.epochs, windows);

  train::TrainOptions to;
  to.progress = ProgressFromFlag(args.progress);
  to.stop = &stop;
  to.train_rows = [&](const model::Shape&, int batch, int) {
    return std::make_unique<task::QaRows>(f, batch, /*shuffle=*/true, args.seed, args.train_file);
  };
  const bool rank0 = !bridge || bridge->rank() == 0;
  const train::TrainResult r = TrainAsJob(
      cfg, to, bridge.get(),
      cfg.train.resume == "auto" ? command_line : command_line + " --set train.resume=auto");
  if (!rank0) return;
  nlohmann::json results;  // eval_results.json's
  if (cfg.train.lora.on()) {
    // A LoRA run's output_dir holds the adapter as PEFT's Trainer saves it (adapter_config.json
    // + adapter_model.safetensors), with the tokenizer; predictions use the base + adapter.
    const std::string step = model::ResolveCheckpointDir(args.output_dir);
    for (const char* name : {model::kAdapterConfigFile, model::kAdapterFile}) {
      WriteFileAtomic(
          (fs::path(args.output_dir) / name).string(),
          ReadFile((fs::path(step) / name).string(),
                   InputKind{"adapter file", "an adapter file", 1ull << 40, "rerun qa train"}));
    }
    CopyTokenizer(tok_path, args.output_dir);
    log::Info("saved the trained LoRA adapter (PEFT format) in {}", args.output_dir);
    if (args.do_eval && !args.validation_file.empty()) {
      QaArgs pa = args;
      pa.adapter = step;
      const double epoch = static_cast<double>(r.last_step) * B * args.accum / f.size();
      PrintScores(Predict(pa, args.model, epoch, &results));
      ReportEval(cfg, r.last_step, results);
    }
    return;
  }
  // The trained model as run_qa.py's output_dir holds it: an HF directory with the tokenizer.
  // The run's newest checkpoint (not the HF files an earlier finish exported beside it).
  const std::string trained = model::ResolveModelFile(model::ResolveCheckpointDir(args.output_dir));
  const model::ParamLayout layout(model::ReadCheckpointShape(trained));
  std::vector<float> params(layout.total());
  model::LoadCheckpoint(trained, layout, params.data());
  model::ExportHf(args.output_dir, layout, params.data());
  CopyTokenizer(tok_path, args.output_dir);
  log::Info("saved the trained model as a Hugging Face directory: {} ({})", args.output_dir,
            FamilyOf(layout.shape().arch).hf_span_architecture);
  if (args.do_eval && !args.validation_file.empty()) {
    const double epoch = static_cast<double>(r.last_step) * B * args.accum / f.size();
    PrintScores(Predict(args, trained, epoch, &results));
    ReportEval(cfg, r.last_step, results);
  }
}

}  // namespace

void AddQaTrainCommand(CLI::App& qa, const std::string& command_line) {
  auto a = std::make_shared<QaArgs>();
  CLI::App* cmd = qa.add_subcommand(
      "train",
      "Fine-tune BERT or DistilBERT for extractive question answering on a SQuAD file, as "
      "run_qa.py --do_train (with --do_eval --validation_file: predict and score after "
      "training); resumes from --output_dir's newest checkpoint");
  AddModelOptions(cmd, *a);
  cmd->add_option(Flag("train_file"), a->train_file, "SQuAD v1.1/v2.0 JSON or HF JSON Lines")
      ->required();
  cmd->add_option(Flag("validation_file"), a->validation_file,
                  "predicted and scored after training with --do_eval");
  cmd->add_flag(Flag("do_train"), a->do_train, "accepted for run_qa.py's command lines");
  cmd->add_flag(Flag("do_eval"), a->do_eval,
                "after training, predict --validation_file and write predictions.json and "
                "eval_results.json");
  cmd->add_option(Flag("per_device_train_batch_size"), a->train_batch,
                  "features per replica group in each micro-batch (one group per socket: "
                  "run_qa.py's per-process batch under mpirun)")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option(Flag("gradient_accumulation_steps"), a->accum, "micro-batches per update")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option(Flag("learning_rate"), a->lr, "AdamW's peak learning rate")
      ->check(FiniteRange(0, 1));
  cmd->add_option(Flag("num_train_epochs"), a->epochs, "epochs over the training features")
      ->check(FiniteRange(0, 1e6));
  cmd->add_option(Flag("max_steps"), a->max_steps, "updates to train (replaces the epochs)");
  cmd->add_option(Flag("warmup_ratio"), a->warmup_ratio, "share of the steps warming up from 0")
      ->check(FiniteRange(0, 1));
  cmd->add_option(Flag("warmup_steps"), a->warmup_steps, "warmup steps (replaces the ratio)")
      ->check(CLI::Range(0, 1 << 30));
  cmd->add_option(Flag("weight_decay"), a->weight_decay,
                  "AdamW weight decay of the weights (not biases or LayerNorm)")
      ->check(FiniteRange(0, 1e3));
  cmd->add_option(Flag("adam_beta1"), a->beta1, "AdamW beta1")->check(FiniteRange(0, 0.999999));
  cmd->add_option(Flag("adam_beta2"), a->beta2, "AdamW beta2")->check(FiniteRange(0, 0.999999));
  cmd->add_option(Flag("adam_epsilon"), a->adam_eps, "AdamW epsilon")->check(FiniteRange(0, 1));
  cmd->add_option(Flag("max_grad_norm"), a->max_grad_norm, "gradient clipping norm (0: none)")
      ->check(FiniteRange(0, 1e30));
  cmd->add_option(Flag("save_steps"), a->save_steps,
                  "checkpoint every N steps (0: at the end only)")
      ->check(CLI::Range(0, 1 << 30));
  cmd->add_option(Flag("seed"), a->seed, "seed of the new head, the feature order and dropout");
  cmd->add_option(Flag("report_to"), a->report_to,
                  "also report the metrics to: none, tensorboard (an event file in "
                  "output_dir/runs; train.report_to)");
  cmd->add_option(Flag("max_train_samples"), a->max_train_samples,
                  "use only the first N training examples (0: all)")
      ->check(CLI::Range(0, 1 << 30));
  cmd->add_flag(Flag("use_ipex"), a->use_ipex, "accepted for run_qa.py's command lines (a no-op)");
  cmd->add_option(Flag("ddp_backend"), a->ddp_backend,
                  "accepted for run_qa.py's command lines (a no-op: the engine's collectives)");
  cmd->add_flag("--resume-fallback", a->resume_fallback,
                "resume from the newest good checkpoint if the newest is damaged (as train's)");
  cmd->add_option(Flag("lora_r"), a->lora_r,
                  "train a LoRA adapter of this rank over the frozen model instead of every "
                  "weight (train.lora.r; the QA head trains fully, as PEFT's QUESTION_ANS)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option(Flag("lora_alpha"), a->lora_alpha, "LoRA alpha (scale alpha / r)")
      ->check(FiniteRange(1e-6, 1e6));
  cmd->add_option(Flag("lora_dropout"), a->lora_dropout, "dropout of the adapters' input")
      ->check(FiniteRange(0, 0.999));
  cmd->add_option(Flag("lora_target_modules"), a->lora_targets,
                  "modules to adapt, comma-separated PEFT names (default query,value; "
                  "DistilBERT q_lin,v_lin; all-linear)");
  cmd->callback([a, command_line] {
    if (a->do_eval && a->validation_file.empty()) {
      throw InputError("--do_eval needs --validation_file", "pass the SQuAD dev file");
    }
    RunTrain(*a, command_line);
  });
}

void AddQaPredictCommand(CLI::App& qa) {
  auto a = std::make_shared<QaArgs>();
  CLI::App* cmd = qa.add_subcommand(
      "predict",
      "Answer every question of a SQuAD file with a trained model (run_qa.py --do_eval): "
      "predictions.json, nbest_predictions.json, eval_results.json in --output_dir; prints the "
      "official scores");
  AddModelOptions(cmd, *a);
  cmd->add_option(Flag("validation_file"), a->validation_file, "the SQuAD file to answer")
      ->required();
  cmd->add_flag(Flag("do_eval"), a->do_eval, "accepted for run_qa.py's command lines");
  cmd->callback([a] {
    QaModelShape(*a, /*training=*/false);
    PrintScores(Predict(*a, a->model, -1));
  });
}

}  // namespace cputrain::cli
