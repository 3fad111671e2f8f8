// Sequence classification as a task of the command core (classify.h): run_glue.py's and
// run_classification.py's flags beyond the shared ones, their files made into rows (one text or
// a pair, truncated, padded per batch), a *ForSequenceClassification head over any family with
// one, and after prediction predict_results*.txt or evaluate's metrics.
#include "task/classify/classify_task.h"

#include <fmt/format.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/files.h"
#include "common/log.h"
#include "data/tokenizer.h"
#include "model/checkpoint.h"
#include "model/checkpoint_path.h"
#include "model/family.h"
#include "model/hf.h"
#include "model/safetensors.h"
#include "task/classify/classify.h"
#include "task/classify/features.h"
#include "task/classify/glue.h"
#include "task/classify/labels.h"
#include "task/classify/metrics.h"
#include "task/classify/table.h"
#include "train/rows.h"

namespace cputrain::task {
namespace {

namespace fs = std::filesystem;
using model::ProblemType;

constexpr TaskInfo kInfo = {
    .name = "classify",
    .help =
        "Sequence classification (GLUE and CSV / JSON Lines files, as Hugging Face's "
        "run_glue.py and run_classification.py): see `classify --help`",
    .train_help =
        "Fine-tune a classifier (BERT, DistilBERT, or a decoder with a score head) on a CSV or "
        "JSON Lines file, as run_glue.py --do_train (with --do_eval / --do_predict: evaluate the "
        "validation file, predict the test file after training); resumes from --output_dir's "
        "newest checkpoint",
    .predict_help =
        "Label every row of --test_file with a trained classifier (run_glue.py "
        "--do_predict): predict_results.txt in --output_dir",
    .evaluate_help =
        "Score a trained classifier on a labelled --validation_file (run_glue.py "
        "--do_eval): eval_results.json in --output_dir; prints the metrics",
    .predict_split = SplitKind::kTest,
    .test_file = true,
    .model_help =
        "a local Hugging Face model directory (BERT, DistilBERT, or a decoder family "
        "with a sequence classifier: a pretrained body gets a new head), or a run's "
        "output_dir / checkpoint",
    .file_help = "CSV, TSV or JSON Lines with a header / keys: the text column(s) and the label",
};

}  // namespace

const TaskInfo& ClassifyTask::info() const { return kInfo; }

std::vector<Option> ClassifyTask::Options() {
  constexpr unsigned kAll = kEveryCommand;
  constexpr unsigned kTrainEval =
      static_cast<unsigned>(Command::kTrain) | static_cast<unsigned>(Command::kEvaluate);
  constexpr unsigned kTrainOnly = static_cast<unsigned>(Command::kTrain);
  return {
      {"task_name",
       "a GLUE task (" + GlueTaskNames() +
           "): its text columns, label names and metrics, for "
           "local files",
       &o_.task_name,
       {},
       kAll},
      {"text_column_names",
       "comma-separated text columns joined into one text (run_classification.py; default: the "
       "task's, else sentence1/sentence2, else the first columns that are not the label)",
       &o_.text_column_names,
       {},
       kAll},
      {"text_column_delimiter",
       "what joins --text_column_names",
       &o_.text_column_delimiter,
       {},
       kAll},
      {"sentence1_key",
       "the first text column of a pair (or the one text)",
       &o_.sentence1_key,
       {},
       kAll},
      {"sentence2_key", "the second text column of a pair", &o_.sentence2_key, {}, kAll},
      {"label_column_name", "the label column", &o_.label_column_name, {}, kAll},
      {"problem_type",
       "single_label_classification, regression or multi_label_classification (default: from "
       "the labels: numbers that are not all integers regress, lists are multi-label)",
       &o_.problem_type,
       {"single_label_classification", "regression", "multi_label_classification"},
       kTrainOnly},
      {"do_regression", "the labels are numbers to regress (run_classification.py)",
       &o_.do_regression, kTrainOnly},
      {"metric_name",
       "the metric (default: the GLUE task's, else mse for a regression, micro F1 for "
       "multi-label, accuracy): accuracy, f1, matthews_correlation, pearson, spearmanr or mse",
       &o_.metric_name,
       {"accuracy", "f1", "matthews_correlation", "pearson", "spearmanr", "mse"},
       kTrainEval},
      {"validation_mismatched_file",
       "MNLI's validation_mismatched split: scored beside --validation_file (metrics _mm)",
       &o_.validation_mismatched_file,
       {},
       kTrainEval},
      {"pad_to_max_length",
       "pad every row to --max_seq_length (default: each batch to its longest row)",
       &o_.pad_to_max_length, kAll},
      {"shuffle_train_dataset",
       "shuffle the training rows once (seeded) before --max_train_samples picks the first",
       &o_.shuffle_train_dataset, kTrainOnly},
  };
}

void ClassifyTask::CheckFlags(const Args& args, Command command) {
  (void)args;
  command_ = command;
  if (!o_.task_name.empty() && FindGlueTask(o_.task_name) == nullptr) {
    throw InputError(fmt::format("--task_name '{}' is not a GLUE task", o_.task_name),
                     "use one of " + GlueTaskNames() + ", or leave it out for your own columns");
  }
  glue_ = FindGlueTask(o_.task_name);
  if (!o_.validation_mismatched_file.empty() && o_.task_name != "mnli") {
    throw InputError("--validation_mismatched_file is MNLI's", "add --task_name mnli");
  }
  if (o_.do_regression && !o_.problem_type.empty() && o_.problem_type != "regression") {
    throw InputError(fmt::format("--do_regression with --problem_type {}", o_.problem_type),
                     "pass one of them");
  }
  if (!o_.sentence2_key.empty() && o_.sentence1_key.empty()) {
    throw InputError("--sentence2_key without --sentence1_key", "name both columns of the pair");
  }
}

namespace {

// The families with a sequence classifier (hf_classify_architecture), for messages.
std::string ClassifierFamilies() {
  std::string out;
  for (const model::Family* f : model::Families()) {
    if (*f->hf_classify_architecture != '\0')
      out += (out.empty() ? "" : ", ") + std::string(f->name);
  }
  return out;
}

}  // namespace

void ClassifyTask::CheckModel(const model::Shape& s, const Args& args) {
  model_labels_ = s.labels;
  model_problem_ = s.problem;
  model_classifier_ = s.head == model::Head::kClassify;
  model_vocab_ = s.V;
  if (*model::FamilyOf(s.arch).hf_classify_architecture != '\0') return;
  throw InputError(
      fmt::format("--model_name_or_path '{}' is a {} model, which has no sequence classifier "
                  "here",
                  args.model, model::FamilyOf(s.arch).name),
      "classify with a model of a family that has one: " + ClassifierFamilies());
}

namespace {

// --model_name_or_path's config.json, or an empty object (a checkpoint of ours has none).
json ModelConfig(const std::string& model) {
  const fs::path path = fs::path(model) / model::kHfConfigFile;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return json::object();
  const json j = json::parse(ReadFile(path.string()), nullptr, false);
  return j.is_object() ? j : json::object();
}

// The outputs of a PEFT SEQ_CLS adapter: the rows of its saved classifier (classifier.weight, a
// decoder's score.weight).
int AdapterOutputs(const std::string& dir) {
  const std::string path = (fs::path(dir) / "adapter_model.safetensors").string();
  const model::SafetensorsFile f = model::SafetensorsFile::Open(path);
  for (const model::SafeTensor& t : f.tensors()) {
    const std::string& n = t.name;
    for (const char* head : {"classifier.weight", "score.weight"}) {
      const std::string h = head;
      if (n.size() >= h.size() && n.compare(n.size() - h.size(), h.size(), h) == 0 &&
          n.find("pre_classifier") == std::string::npos && !t.shape.empty()) {
        return static_cast<int>(t.shape[0]);
      }
    }
  }
  throw InputError(fmt::format("adapter '{}' holds no classifier (classifier.weight or "
                               "score.weight among its modules to save)",
                               dir),
                   "pass the adapter `classify train --lora_r` wrote (PEFT's SEQ_CLS)");
}

}  // namespace

// The tokenizer, the padding id (BERT's [PAD]; a decoder's pad_token_id, else its tokenizer's end
// of sequence, as fine-tuning scripts set pad_token = eos_token), and, when predicting, the
// trained model's labels.
void ClassifyTask::OpenTokenizer(const Args& args) {
  tokenizer_ = data::MakeTokenizer(args.tokenizer.empty() ? args.model : args.tokenizer);
  encoder_ = std::make_unique<PairEncoder>(*tokenizer_, args.max_seq_length);
  model_config_ = ModelConfig(args.model);
  pad_ = encoder_->pad();
  if (pad_ < 0) {
    const json& p = model_config_.value("pad_token_id", json());
    pad_ = p.is_number_integer() ? p.get<int>() : tokenizer_->eos_token();
  }
  if (pad_ < 0) pad_ = 0;
  if (model_vocab_ > 0 && pad_ >= model_vocab_) {
    RefuseTokenId(pad_, model_vocab_, *tokenizer_,
                  "the padding token (config.json's pad_token_id, else the tokenizer's eos)");
  }
  // A checkpoint read as a classifier says it is one; an HF directory says so in config.json.
  const json arch = model_config_.value("architectures", json::array());
  if (model_config_.contains("architectures")) {
    model_classifier_ =
        arch.is_array() && !arch.empty() && arch[0].is_string() &&
        arch[0].get<std::string>().find("ForSequenceClassification") != std::string::npos;
  }
  if (command_ == Command::kTrain) return;
  if (!args.adapter.empty()) {  // a LoRA classifier: its head's rows count the outputs
    model_labels_ = AdapterOutputs(args.adapter);
    model_problem_ = model_labels_ == 1 ? ProblemType::kRegression : ProblemType::kSingleLabel;
  } else if (!model_classifier_) {
    throw InputError(fmt::format("--model_name_or_path '{}' is not a trained classifier (its "
                                 "config.json names no *ForSequenceClassification)",
                                 args.model),
                     "pass the --output_dir of `classify train`, or a classifier's directory");
  }
  labels_ = LabelsFromModel(model_config_, model_labels_, model_problem_);
  have_labels_ = true;
}

// The text columns and the label of a file: --text_column_names (joined), --task_name's,
// --sentence1_key / --sentence2_key, else run_glue.py's guess: sentence1 and sentence2 if there
// are, else the first two columns that are not the label (one if there is one).
Columns ClassifyTask::ColumnsOf(const Table& t, bool labelled) const {
  Columns c;
  const auto has = [&](const std::string& n) {
    return std::find(t.columns.begin(), t.columns.end(), n) != t.columns.end();
  };
  // A test file's labels are not read (run_glue.py drops the column to predict: GLUE's test
  // splits hold -1).
  if (labelled) c.label = t.Column(o_.label_column_name, "--label_column_name");
  if (!o_.text_column_names.empty()) {
    std::size_t from = 0;
    while (from <= o_.text_column_names.size()) {
      std::size_t to = o_.text_column_names.find(',', from);
      if (to == std::string::npos) to = o_.text_column_names.size();
      c.joined.push_back(
          t.Column(o_.text_column_names.substr(from, to - from), "--text_column_names"));
      from = to + 1;
    }
    return c;
  }
  std::string a = o_.sentence1_key, b = o_.sentence2_key;
  if (a.empty() && glue_) {
    a = glue_->sentence1;
    b = glue_->sentence2 ? glue_->sentence2 : "";
  }
  if (a.empty()) {
    std::vector<std::string> texts;
    for (const std::string& n : t.columns)
      if (n != o_.label_column_name && n != "idx") texts.push_back(n);
    if (has("sentence1") && has("sentence2")) texts = {"sentence1", "sentence2"};
    if (texts.empty()) {
      throw InputError(fmt::format("{} has no text column beside the label", t.path),
                       "name it with --text_column_names or --sentence1_key");
    }
    a = texts[0];
    if (texts.size() > 1) b = texts[1];
  }
  const std::string flag = glue_ && o_.sentence1_key.empty() ? "--task_name" : "--sentence1_key";
  c.first = t.Column(a, flag);
  if (!b.empty()) c.second = t.Column(b, flag);
  return c;
}

// The label list of the training table (the other splits' files are read later: their labels
// are checked against it).
void ClassifyTask::BuildLabels(const Table& train, std::size_t column, const Args& args) {
  (void)args;
  std::optional<ProblemType> forced;
  if (o_.do_regression) forced = ProblemType::kRegression;
  if (!o_.problem_type.empty()) forced = model::ProblemFromName(o_.problem_type);
  labels_ = LabelsFromData({&train, column}, {}, glue_, forced);
  have_labels_ = true;
  log::Info("{}: {} labels, {}", train.path, labels_.outputs(),
            model::ProblemName(labels_.problem));
}

// The rows of t (by c's columns) appended to s, tokenized in parallel.
void ClassifyTask::AddRows(const Table& t, const Columns& c, ClassifySplit* s) const {
  const std::size_t n = t.rows.size();
  std::vector<std::vector<std::int32_t>> ids(n);
  std::vector<int> second(n);
  const auto text = [&](std::size_t r, std::size_t col) -> std::string {
    const json& v = t.rows[r][col];
    if (v.is_string()) return v.get<std::string>();
    if (v.is_null()) {
      throw InputError(fmt::format("{}, line {}: column '{}' is missing (pandas reads empty cells "
                                   "and NA, N/A, NaN, null, None as missing)",
                                   t.path, t.lines[r], t.columns[col]),
                       "give every row its text");
    }
    return v.dump();  // a number in a text column, as its digits
  };
  tbb::parallel_for(std::size_t{0}, n, [&](std::size_t r) {
    std::string a = c.joined.empty() ? text(r, c.first) : text(r, c.joined[0]);
    for (std::size_t k = 1; k < c.joined.size(); ++k)
      a += o_.text_column_delimiter + text(r, c.joined[k]);
    if (c.second == SIZE_MAX) {
      second[r] = encoder_->Encode(a, nullptr, &ids[r]);
    } else {
      const std::string b = text(r, c.second);
      const std::string_view bv(b);
      second[r] = encoder_->Encode(a, &bv, &ids[r]);
    }
  });
  const std::size_t K = static_cast<std::size_t>(labels_.outputs());
  const bool values = labels_.problem != ProblemType::kSingleLabel;
  for (std::size_t r = 0; r < n; ++r) {
    const std::int32_t* bad = OutsideVocabulary(ids[r].data(), ids[r].data() + ids[r].size(),
                                                model_vocab_ > 0 ? model_vocab_ : INT32_MAX);
    if (bad != ids[r].data() + ids[r].size()) {
      RefuseTokenId(*bad, model_vocab_, *tokenizer_,
                    fmt::format("{}, line {}", t.path, t.lines[r]));
    }
    s->ids_.insert(s->ids_.end(), ids[r].begin(), ids[r].end());
    s->begin_.push_back(s->ids_.size());
    s->second_.push_back(second[r]);
    if (c.label == SIZE_MAX) continue;
    int id = 0;
    std::vector<float> v(K, 0.f);
    RowTargets(labels_, {&t, c.label}, r, &id, v.data());
    if (values) {
      s->values_.insert(s->values_.end(), v.begin(), v.end());
    } else {
      s->label_.push_back(id);
    }
  }
  s->K_ = K;
  s->labelled_ = c.label != SIZE_MAX;
}

// An allocation that fails while a file is read and tokenized was sized by that file (the caps of
// table.h bound what they can): it is reported as the input's, exit 2, not as std::bad_alloc.
std::unique_ptr<Split> ClassifyTask::Read(SplitKind kind, const Args& args) {
  try {
    return ReadSplit(kind, args);
  } catch (const std::bad_alloc&) {
    throw InputError(fmt::format("{} '{}': reading and tokenizing it ran out of memory",
                                 FileFlag(kind), args.File(kind)),
                     "split the file, or shorten its rows (docs/classification.md, \"Size "
                     "limits\")");
  }
}

std::unique_ptr<Split> ClassifyTask::ReadSplit(SplitKind kind, const Args& args) {
  const std::string& path = args.File(kind);
  Table t = ReadTable(path, FileFlag(kind));
  if (kind == SplitKind::kTrain && o_.shuffle_train_dataset) {
    std::vector<std::size_t> order(t.rows.size());
    train::EpochPermutation(order.size(), args.seed, 0, order.data());
    Table s = t;
    for (std::size_t i = 0; i < order.size(); ++i) {
      s.rows[i] = t.rows[order[i]];
      s.lines[i] = t.lines[order[i]];
    }
    t = std::move(s);
  }
  const int limit = args.Limit(kind);
  if (limit > 0 && static_cast<std::size_t>(limit) < t.rows.size()) {
    t.rows.resize(static_cast<std::size_t>(limit));
    t.lines.resize(static_cast<std::size_t>(limit));
  }
  const bool labelled = kind != SplitKind::kTest;
  const Columns c = ColumnsOf(t, labelled);
  if (kind == SplitKind::kTrain) BuildLabels(t, c.label, args);
  CPUTRAIN_CHECK(have_labels_, "the labels are known before a labelled file is read");
  auto s = std::make_unique<ClassifySplit>();
  s->path_ = path;
  s->pad_ = pad_;
  s->dynamic_ = !o_.pad_to_max_length;
  AddRows(t, c, s.get());
  s->matched_ = s->rows();
  if (kind == SplitKind::kValidation && !o_.validation_mismatched_file.empty()) {
    Table mm = ReadTable(o_.validation_mismatched_file, "--validation_mismatched_file");
    if (limit > 0 && static_cast<std::size_t>(limit) < mm.rows.size()) {
      mm.rows.resize(static_cast<std::size_t>(limit));
      mm.lines.resize(static_cast<std::size_t>(limit));
    }
    AddRows(mm, ColumnsOf(mm, true), s.get());
  }
  log::Info(
      "{}: {} rows{}, at most {} tokens", path, s->rows(),
      s->rows() > s->matched_ ? fmt::format(" (+ {} mismatched)", s->rows() - s->matched_) : "",
      [&] {
        int most = 0;
        for (std::size_t i = 0; i < s->rows(); ++i) most = std::max(most, s->length(i));
        return most;
      }());
  return s;
}

std::vector<Extra> ClassifyTask::Extras() {
  struct State {
    ClassifyTask task;
    Args args;
    std::string dump;
  };
  auto st = std::make_shared<State>();
  ClassifyOptions& o = st->task.o_;
  return {{"features",
           "Read a CSV / JSON Lines file as `classify train` does and print how many rows it makes "
           "(--dump: each row's input_ids, token_type_ids and label as JSON Lines)",
           {Option("tokenizer_name", "vocab.txt, tokenizer.json or their directory",
                   &st->args.tokenizer)
                .Required(),
            Option("train_file", "the file", &st->args.train_file).Required(),
            Option("max_seq_length", "tokens per row, specials included", &st->args.max_seq_length,
                   4, 1 << 16),
            Option("task_name", "a GLUE task", &o.task_name),
            Option("text_column_names", "comma-separated text columns", &o.text_column_names),
            Option("text_column_delimiter", "what joins them", &o.text_column_delimiter),
            Option("sentence1_key", "the first text column", &o.sentence1_key),
            Option("sentence2_key", "the second text column", &o.sentence2_key),
            Option("label_column_name", "the label column", &o.label_column_name),
            Option("problem_type", "the labels' problem", &o.problem_type),
            Option("dump", "write the rows as JSON Lines", &st->dump)},
           [st] {
             ClassifyTask& t = st->task;
             st->args.model = st->args.tokenizer;
             t.CheckFlags(st->args, Command::kTrain);
             t.OpenTokenizer(st->args);
             const std::unique_ptr<Split> split = t.Read(SplitKind::kTrain, st->args);
             const auto& s = static_cast<const ClassifySplit&>(*split);
             std::string out;
             for (std::size_t i = 0; !st->dump.empty() && i < s.rows(); ++i) {
               json row;
               row["input_ids"] =
                   std::vector<int>(s.ids_.begin() + s.begin_[i], s.ids_.begin() + s.begin_[i + 1]);
               std::vector<int> types(static_cast<std::size_t>(s.length(i)));
               for (int k = s.second_[i]; k < s.length(i); ++k) types[k] = 1;
               row["token_type_ids"] = types;
               if (!s.label_.empty()) row["label"] = s.label_[i];
               if (!s.values_.empty()) {
                 row["label"] = std::vector<float>(s.values_.begin() + i * s.K_,
                                                   s.values_.begin() + (i + 1) * s.K_);
               }
               out += row.dump() + "\n";
             }
             if (!st->dump.empty()) WriteFileAtomic(st->dump, out);
             const std::string line =
                 fmt::format("{}: {} rows, {} labels ({})\n", s.path(), s.rows(),
                             t.labels_.outputs(), model::ProblemName(t.labels_.problem));
             std::fwrite(line.data(), 1, line.size(), stdout);
           }}};
}

std::unique_ptr<Task> MakeClassifyTask() { return std::make_unique<ClassifyTask>(); }

}  // namespace cputrain::task
