// Question answering as a task of the command core (qa.h): run_qa.py's flags beyond the shared
// ones, SQuAD files made into run_qa.py's features (squad_features.h), a span head over BERT or
// DistilBERT, and utils_qa.py's post-processing with the official scores after prediction.
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/log.h"
#include "data/tokenizer.h"
#include "data/wordpiece.h"
#include "model/family.h"
#include "task/qa/qa.h"
#include "task/qa/squad.h"
#include "task/qa/squad_eval.h"
#include "task/qa/squad_features.h"

namespace cputrain::task {
namespace {

// One SQuAD file's examples and their features (padded to max_seq_length: run_qa.py's
// pad_to_max_length default); rows: the first `rows` features are trained on or predicted.
class QaSplit final : public Split {
 public:
  QaSplit(SquadData data, QaFeatures features, std::size_t rows)
      : data_(std::move(data)), features_(std::move(features)), rows_(rows) {}
  std::size_t rows() const override { return rows_; }
  std::size_t examples() const override { return data_.examples.size(); }
  int length(std::size_t i) const override { return features_.row(i).length; }
  void Load(std::size_t i, int r, int T, model::Activations& a) const override {
    const std::size_t at = static_cast<std::size_t>(r) * T;
    const auto ids = features_.input_ids(i);
    std::copy(ids.begin(), ids.end(), a.inputs + at);
    features_.TokenTypeIds(i, a.types + at);
    const QaFeatures::Row& row = features_.row(i);
    a.lengths[r] = row.length;
    a.starts[r] = row.start_position;
    a.ends[r] = row.end_position;
  }
  const std::string& path() const override { return data_.path; }
  const SquadData& data() const { return data_; }
  const QaFeatures& features() const { return features_; }

 private:
  SquadData data_;
  QaFeatures features_;
  std::size_t rows_;
};

// run_qa.py's own flags, with its defaults.
struct QaOptions {
  int doc_stride = 128;
  bool v2 = false;
  int n_best = 20, max_answer = 30;
  double null_threshold = 0;
};

constexpr TaskInfo kInfo = {
    .name = "qa",
    .help = "Extractive question answering (SQuAD, as Hugging Face's run_qa.py): see `qa --help`",
    .train_help =
        "Fine-tune BERT or DistilBERT for extractive question answering on a SQuAD file, as "
        "run_qa.py --do_train (with --do_eval --validation_file: predict and score after "
        "training); resumes from --output_dir's newest checkpoint",
    .predict_help =
        "Answer every question of a SQuAD file with a trained model (run_qa.py --do_eval): "
        "predictions.json, nbest_predictions.json, eval_results.json in --output_dir; prints "
        "the official scores",
    .evaluate_help = "",
    .predict_split = SplitKind::kValidation,
    .test_file = false,
    .model_help =
        "a local Hugging Face BERT or DistilBERT directory (BertForQuestionAnswering, "
        "BertModel or a pretraining checkpoint: a new qa head is initialized), or a "
        "run's output_dir / checkpoint",
    .file_help = "SQuAD v1.1/v2.0 JSON or HF JSON Lines",
};

class QaTask final : public Task {
 public:
  const TaskInfo& info() const override { return kInfo; }
  void Defaults(Args& args) const override { args.max_seq_length = 384; }
  std::vector<Option> Options() override {
    constexpr unsigned kTrainPredict =
        static_cast<unsigned>(Command::kTrain) | static_cast<unsigned>(Command::kPredict);
    return {
        {"doc_stride", "context tokens shared by consecutive windows of a long context",
         &o_.doc_stride, 0, 1 << 16, kTrainPredict},
        {"version_2_with_negative",
         "SQuAD v2.0: unanswerable questions; the null answer wins past the threshold", &o_.v2,
         kTrainPredict},
        {"n_best_size", "answers kept per example in the n-best list", &o_.n_best, 1, 1 << 16,
         kTrainPredict},
        {"max_answer_length", "the longest answer, in tokens", &o_.max_answer, 1, 1 << 16,
         kTrainPredict},
        {"null_score_diff_threshold",
         "v2.0: predict no answer when null score - best score exceeds this", &o_.null_threshold,
         -1e30, 1e30, kTrainPredict},
    };
  }
  model::HeadSpec ModelHead() const override { return model::Head::kSpan; }
  void CheckModel(const model::Shape& s, const Args& args) override {
    if (s.encoder()) return;
    throw InputError(fmt::format("--model_name_or_path '{}' is a {} model, a decoder: question "
                                 "answering fine-tunes an encoder",
                                 args.model, model::FamilyOf(s.arch).name),
                     "give a BERT or DistilBERT directory (model_type bert or distilbert)");
  }
  // BERT's WordPiece only: the [CLS] question [SEP] context [SEP] layout and the offsets are
  // WordPiece's; a BPE tokenizer.json holding [CLS] would make features the model was never
  // trained on.
  void OpenTokenizer(const Args& args) override {
    const std::string path = args.tokenizer.empty() ? args.model : args.tokenizer;
    tokenizer_ = data::MakeTokenizer(path);
    if (dynamic_cast<const data::WordPieceTokenizer*>(tokenizer_.get()) == nullptr) {
      throw InputError(
          fmt::format("tokenizer '{}' ({}) is not WordPiece", path, tokenizer_->name()),
          "question answering reads BERT's WordPiece tokenizer: pass --tokenizer_name the "
          "model's vocab.txt, its WordPiece tokenizer.json, or their directory");
    }
  }
  std::unique_ptr<Split> Read(SplitKind kind, const Args& args) override;
  model::HeadSpec Head(const model::Shape&, Command) const override { return model::Head::kSpan; }
  Outcome Finish(SplitKind kind, const Split& split, const Logits& logits,
                 const Args& args) override;
  std::vector<Extra> Extras() override { return QaExtras(); }

 private:
  QaOptions o_;
  std::unique_ptr<data::Tokenizer> tokenizer_;
};

// The examples of a file, the first `limit` if limit > 0 (run_qa.py's max_*_samples counts
// examples). flag: the option that named the file, for messages.
SquadData ReadExamples(const std::string& flag, const std::string& path, int limit) {
  SquadData d;
  try {
    d = ReadSquad(path);
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

std::unique_ptr<Split> QaTask::Read(SplitKind kind, const Args& args) {
  SquadData data = ReadExamples(FileFlag(kind), args.File(kind), args.Limit(kind));
  FeatureOptions fo;
  fo.max_seq_length = args.max_seq_length;
  fo.doc_stride = o_.doc_stride;
  fo.keep_offsets = kind != SplitKind::kTrain;  // post-processing needs them
  QaFeatures f = MakeQaFeatures(data.examples, *tokenizer_, BertSpecialIds(*tokenizer_), fo);
  if (f.size() == 0) {
    throw InputError(fmt::format("{} '{}' has no examples", FileFlag(kind), data.path),
                     "pass a SQuAD file with questions");
  }
  // run_qa.py's --max_train_samples selects N examples, makes their features, then keeps the
  // first N of those (issue 33, item 6); prediction keeps every feature of its examples.
  std::size_t rows = f.size();
  const int limit = args.Limit(kind);
  if (kind == SplitKind::kTrain && limit > 0)
    rows = std::min(rows, static_cast<std::size_t>(limit));
  if (rows < f.size()) {
    log::Info("{}: the first {} of {} features ({})", data.path, rows, f.size(),
              "--max_train_samples, as run_qa.py keeps them");
  }
  return std::make_unique<QaSplit>(std::move(data), std::move(f), rows);
}

Outcome QaTask::Finish(SplitKind kind, const Split& split, const Logits& logits, const Args& args) {
  CPUTRAIN_CHECK(kind == SplitKind::kValidation, "question answering predicts validation files");
  const auto& qa = static_cast<const QaSplit&>(split);
  const QaFeatures& f = qa.features();
  const std::size_t T = static_cast<std::size_t>(f.max_seq_length());
  std::vector<float> start(f.size() * T), end(f.size() * T);
  for (std::size_t s = 0; s < f.size(); ++s) {
    for (std::size_t t = 0; t < T; ++t) {
      start[s * T + t] = logits.row(s)[2 * t];
      end[s * T + t] = logits.row(s)[2 * t + 1];
    }
  }
  PostprocessOptions po;
  po.version_2_with_negative = o_.v2;
  po.n_best_size = o_.n_best;
  po.max_answer_length = o_.max_answer;
  po.null_score_diff_threshold = static_cast<float>(o_.null_threshold);
  const QaPredictions p = Postprocess(qa.data().examples, f, start.data(), end.data(), po);
  WritePredictions(p, args.output_dir, "", o_.v2);
  std::unordered_map<std::string, std::string> answers;
  for (std::size_t i = 0; i < p.ids.size(); ++i) answers[p.ids[i]] = p.answers[i];
  const SquadScores s = EvaluatePredictions(qa.data().examples, answers, o_.v2);
  Outcome o;
  o.printed = s.ToJson() + "\n";
  if (!o_.v2) {
    o.metrics = {{"exact_match", s.exact}, {"f1", s.f1}};
    return o;
  }
  o.metrics = {{"exact", s.exact}, {"f1", s.f1}, {"total", s.total}};
  if (s.has_ans_total) {
    o.metrics.insert(o.metrics.end(), {{"HasAns_exact", s.has_ans_exact},
                                       {"HasAns_f1", s.has_ans_f1},
                                       {"HasAns_total", *s.has_ans_total}});
  }
  if (s.no_ans_total) {
    o.metrics.insert(o.metrics.end(), {{"NoAns_exact", s.no_ans_exact},
                                       {"NoAns_f1", s.no_ans_f1},
                                       {"NoAns_total", *s.no_ans_total}});
  }
  return o;
}

}  // namespace

std::unique_ptr<Task> MakeQaTask() { return std::make_unique<QaTask>(); }

}  // namespace cputrain::task
