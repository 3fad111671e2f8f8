// task/: a fine-tuning task as data — what question answering (task/qa/), sequence
// classification (task/classify/) and the tasks to come supply to the one command core that runs
// `cputrain-numa <task> train | predict | evaluate` for all of them (src/cli/task_command.cc).
//
// The core owns everything a task command shares: run_*.py's and the Trainer's flags (Args), the
// --output_dir layout, reading every input before the first step, the trainer (placements, MPI,
// bf16, LoRA, resume, SIGTERM), the batches (TaskRows: the epoch order and dynamic padding),
// prediction, the Hugging Face export and eval_results.json. A task supplies:
//   - its own flags (Options) and their checks;
//   - which models it runs and with which head (CheckModel, Head: model/shape.h's HeadSpec, which
//     names the Hugging Face class the model is read and written as);
//   - its rows, read from the user's files (Read: a Split per file, every row checked);
//   - what becomes of a split's logits: the prediction files it writes and its metrics (Finish);
//   - any commands of its own (Extras: qa features, qa evaluate).
// Adding a task: a folder under src/task/ with a class implementing Task, and one line in
// Tasks() in task/task.cc.
//
// Thread safety: a Task serves one command on the main thread. Split::Load is called from every
// group's driver thread at once and must only read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "model/shape.h"
#include "model/transformer.h"

namespace cputrain::data {
class Tokenizer;
}

namespace cputrain::task {

// The commands the core runs for every task.
enum class Command : unsigned { kTrain = 1, kPredict = 2, kEvaluate = 4 };
inline constexpr unsigned kEveryCommand = 7;

// The files a task reads, by their role (run_*.py's --train_file, --validation_file,
// --test_file): trained on; predicted and scored; predicted.
enum class SplitKind { kTrain, kValidation, kTest };
// "--train_file", "--validation_file", "--test_file".
const char* FileFlag(SplitKind kind);

// run_*.py's ModelArguments / DataTrainingArguments and the Trainer's TrainingArguments that
// every task command takes, with the Trainer's defaults (a task may change a default: Defaults).
struct Args {
  std::string model, tokenizer, output_dir;
  std::string train_file, validation_file, test_file;
  int max_seq_length = 128;
  int train_batch = 8, eval_batch = 8;
  double lr = 5e-5, epochs = 3.0, warmup_ratio = 0, weight_decay = 0;
  double beta1 = 0.9, beta2 = 0.999, adam_eps = 1e-8, max_grad_norm = 1.0;
  // The Trainer's optim and optim_args: adamw_torch (adamw_torch_fused), adafactor or sgd, and
  // "key=value,..." settings of the chosen one (optim.* in the config).
  std::string optim = "adamw_torch", optim_args;
  int max_steps = -1, warmup_steps = 0, accum = 1, save_steps = 500;
  int max_train_samples = 0, max_eval_samples = 0, max_predict_samples = 0;
  bool bf16 = false, do_train = false, do_eval = false, do_predict = false;
  bool overwrite_output_dir = false, resume_fallback = false;
  bool gradient_checkpointing = false;  // train.gradient_checkpointing
  uint64_t seed = 42;
  std::string progress = "auto";
  // The Trainer's report_to: none, tensorboard or all (train.report_to; train/reports.h).
  std::string report_to;
  // LoRA (docs/lora.md): a PEFT adapter to predict with or to continue training, or a new one.
  std::string adapter, lora_targets;
  int lora_r = 0;
  double lora_alpha = 8, lora_dropout = 0;
  // The file of a split ("" if not given) and its max_*_samples (0: all).
  const std::string& File(SplitKind kind) const;
  int Limit(SplitKind kind) const;
};

// One flag of a task's own, declared as data; the core makes it a command-line option
// (run_*.py's spelling, and the same with dashes). commands: the Command bits that take it.
struct Option {
  Option(std::string n, std::string h, bool* v, unsigned cmds = kEveryCommand)
      : name(std::move(n)), help(std::move(h)), value(v), commands(cmds) {}
  Option(std::string n, std::string h, int* v, double lo, double hi, unsigned cmds = kEveryCommand)
      : name(std::move(n)), help(std::move(h)), value(v), min(lo), max(hi), commands(cmds) {}
  Option(std::string n, std::string h, double* v, double lo, double hi,
         unsigned cmds = kEveryCommand)
      : name(std::move(n)), help(std::move(h)), value(v), min(lo), max(hi), commands(cmds) {}
  Option(std::string n, std::string h, std::string* v, std::vector<std::string> accepted = {},
         unsigned cmds = kEveryCommand)
      : name(std::move(n)),
        help(std::move(h)),
        value(v),
        choices(std::move(accepted)),
        commands(cmds) {}
  // The option must be given.
  Option& Required() {
    required = true;
    return *this;
  }

  std::string name;  // "doc_stride"
  std::string help;
  std::variant<int*, double*, bool*, std::string*> value;
  double min = 0, max = 0;           // numbers: the accepted range (finite)
  std::vector<std::string> choices;  // strings: the accepted values (empty: any)
  unsigned commands = kEveryCommand;
  bool required = false;
};

// A command of the task's own beside train / predict / evaluate (qa features, qa evaluate):
// its options (names as written, "--data"), and what it runs once they are parsed.
struct Extra {
  std::string name, help;
  std::vector<Option> options;
  std::function<void()> run;
};

// The rows (features) one file became: what the core batches, trains on or predicts. Every row
// was checked when the split was read.
class Split {
 public:
  virtual ~Split() = default;
  virtual std::size_t rows() const = 0;      // > 0
  virtual std::size_t examples() const = 0;  // the file's examples the rows came from
  // Row i's tokens before its padding (<= the run's T).
  virtual int length(std::size_t i) const = 0;
  // Row i into row r of a's token views (inputs, token types, lengths, labels), T positions
  // long (length(i) real tokens, then the padding token).
  virtual void Load(std::size_t i, int r, int T, model::Activations& a) const = 0;
  // True if each micro-batch may be padded to its longest row (Hugging Face's
  // DataCollatorWithPadding); false: every row has the run's T positions.
  virtual bool dynamic_padding() const { return false; }
  // A language model's rows (sft): row i's kept labels, what a step's loss is the mean over
  // (train/rows.h, LossCount); -1 for a split whose loss is the mean over its rows.
  virtual int loss_labels(std::size_t i) const {
    (void)i;
    return -1;
  }
  // The file, as given; what a row is ("features", "examples": messages and resume records).
  virtual const std::string& path() const = 0;
  virtual const char* unit() const { return "features"; }
};

// A split's logits in row order: a span head's (T, 2) per row, a classifier's (labels).
struct Logits {
  std::vector<float> values;  // rows x width
  std::size_t width = 0;
  const float* row(std::size_t i) const { return values.data() + i * width; }
};

// What a prediction pass leaves besides its files: the metrics, in the order eval_results.json
// writes them (without the "eval_" prefix the core adds; the core adds eval_samples, the rows
// predicted, unless they hold "samples"), and what the command prints.
struct Outcome {
  std::vector<std::pair<std::string, nlohmann::json>> metrics;
  std::string printed;
};

// What the core needs to know of a task before it runs one.
struct TaskInfo {
  const char* name;  // the command: "qa"
  const char* help;
  const char* train_help;
  const char* predict_help;
  const char* evaluate_help;  // "" : the task has no core `evaluate` (qa's is an Extra)
  // The file `predict` reads: the validation file, scored (qa), or the test file (classify).
  SplitKind predict_split;
  // Whether `train` takes --test_file / --do_predict (a test split predicted after training).
  bool test_file;
  // What the help of --model_name_or_path and --train_file etc. say the files are.
  const char* model_help;
  const char* file_help;
};

// A model loaded for generation (a task that generates: Task::generates): its layout and
// parameters (an adapter merged into them), and the pool the KV-cache decoder runs on.
struct GenerationModel {
  WorkerPool& pool;
  const model::ParamLayout& layout;
  const float* params;
};

class Task {
 public:
  virtual ~Task() = default;
  virtual const TaskInfo& info() const = 0;
  // Another spelling the task's users know for a shared flag (TRL's --dataset_path for
  // "train_file"), without dashes; "" for none.
  virtual std::string FlagAlias(const std::string& core_flag) const {
    (void)core_flag;
    return "";
  }
  // The shared flags' defaults this task changes (run_qa.py's --max_seq_length 384).
  virtual void Defaults(Args& args) const { (void)args; }
  // Its own flags; the pointers stay valid while the Task lives.
  virtual std::vector<Option> Options() = 0;
  // Checks among the flags once parsed (InputError naming them), before anything is read, and
  // keeps what it derives from them (the command, a GLUE task's table).
  virtual void CheckFlags(const Args& args, Command command) {
    (void)args;
    (void)command;
  }
  // The head --model_name_or_path is first read with, before any data is (its family and
  // dimensions: CheckModel's shape).
  virtual model::HeadSpec ModelHead() const = 0;
  // Refuses a model this task cannot run (a decoder for question answering), naming the flag,
  // and keeps what the task needs of it later (its labels, its vocabulary): the one call that
  // tells a task its model, so not const.
  virtual void CheckModel(const model::Shape& shape, const Args& args) = 0;
  // Opens the tokenizer (--tokenizer_name, else the model's directory): before any split.
  virtual void OpenTokenizer(const Args& args) = 0;
  // Reads the file of `kind` (args.File(kind)) into rows, every row checked; args.Limit(kind)
  // as run_*.py's max_*_samples. InputError naming the file, the row and the fix.
  virtual std::unique_ptr<Split> Read(SplitKind kind, const Args& args) = 0;
  // The head the command trains or predicts with, once its splits are read (classification's
  // labels come from the training file) and the model's shape is known (`model`, as ModelHead
  // read it).
  virtual model::HeadSpec Head(const model::Shape& model, Command command) const = 0;
  // Adds to the config.json of the exported model (classification's id2label), or of a LoRA run's
  // output_dir record; `dir` is where it is written.
  virtual void AnnotateConfig(nlohmann::json& config) const { (void)config; }
  // The outputs of a predicted split: writes its files into args.output_dir (predictions.json,
  // predict_results.txt, ...) and returns its metrics (none for an unlabelled test file).
  virtual Outcome Finish(SplitKind kind, const Split& split, const Logits& logits,
                         const Args& args) = 0;
  virtual std::vector<Extra> Extras() { return {}; }
  // True if `predict` generates text from the prompts of its split (sft) instead of reading one
  // forward pass's logits: the core then loads the model and calls Generate, not Finish.
  virtual bool generates() const { return false; }
  // True if the task scores a predicted split from each row's logits as they come instead of
  // keeping them all (sft's eval loss: a language model's (T, vocabulary) logits per row are too
  // many to keep): the core then calls OnLogits for every row, in row order, with its micro-batch
  // j and its T positions, and Finish with no logits.
  virtual bool streams_logits() const { return false; }
  virtual void OnLogits(const Split& split, std::size_t row, std::size_t j, const float* logits,
                        int T) {
    (void)split;
    (void)row;
    (void)j;
    (void)logits;
    (void)T;
  }
  virtual Outcome Generate(const Split& split, const GenerationModel& model, const Args& args) {
    (void)split;
    (void)model;
    (void)args;
    return {};
  }
};

// Every token id a task's rows feed the model (their tokens and the padding) must be a row of its
// embedding, [0, V) for the vocab_size V of CheckModel's shape: a larger id reads past the
// embedding (a crash) or trains its padded rows, which the model does not have. `generate`
// refuses such a tokenizer and the KV-cache decoder such an id (model/decoder.cc); a task checks
// its rows as it reads them, before any work. OutsideVocabulary finds the first id of
// [begin, end) outside [0, V) (end if none); RefuseTokenId throws the InputError naming `where`
// (the file and row), the tokenizer's size and the model's, and the fix.
const std::int32_t* OutsideVocabulary(const std::int32_t* begin, const std::int32_t* end, int V);
[[noreturn]] void RefuseTokenId(int id, int V, const data::Tokenizer& tokenizer,
                                const std::string& where);

// The tasks the binary runs (Tasks() in task/task.cc: one line each), in the order `--help` lists
// them.
struct TaskEntry {
  const char* name;
  std::unique_ptr<Task> (*make)();
};
const std::vector<TaskEntry>& Tasks();

}  // namespace cputrain::task
