// Supervised fine-tuning as a task of the command core (sft.h): TRL's SFT flags beyond the shared
// ones, the dataset's rows as language-model rows (targets the next label, -1 where TRL's label is
// -100 and in the padding), the loss over each step's kept labels, and `predict`: completions of
// the prompts by the KV-cache decoder, as JSON Lines.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/chat_template.h"
#include "common/error.h"
#include "common/files.h"
#include "common/log.h"
#include "data/tokenizer.h"
#include "model/decoder.h"
#include "model/family.h"
#include "task/sft/sft.h"
#include "task/sft/sft_data.h"

namespace cputrain::task {
namespace {

namespace fs = std::filesystem;
using chat::Json;

constexpr TaskInfo kInfo = {
    .name = "sft",
    .help =
        "Supervised fine-tuning of a decoder on chat, prompt-completion or text data (TRL's "
        "SFTTrainer, `trl sft`): see `sft --help`",
    .train_help =
        "Fine-tune a decoder (fully or with LoRA) on a JSON Lines / JSON dataset of "
        "\"messages\", \"prompt\"/\"completion\" or \"text\" rows, rendered by the model's chat "
        "template, the loss on the completion or assistant tokens as TRL's SFTTrainer; resumes "
        "from --output_dir's newest checkpoint",
    .predict_help =
        "Complete every prompt of a dataset (\"prompt\" or \"messages\" rows; a chat rendered "
        "with add_generation_prompt) with the KV-cache decoder: predictions.jsonl in "
        "--output_dir",
    .evaluate_help = "",
    .predict_split = SplitKind::kTest,
    .test_file = false,
    .model_help =
        "a local Hugging Face decoder directory (Llama, Qwen2, Qwen3, Mistral, Gemma 3, Phi-3, "
        "GPT-2; its tokenizer.json and chat template), or a run's output_dir / checkpoint",
    .file_help =
        "JSON Lines or JSON rows: {\"messages\": [...]}, {\"prompt\", \"completion\"} or "
        "{\"text\"} (TRL's dataset forms)",
};

// One file's rows as language-model rows (sft_data.h's SftRows).
class SftSplit final : public Split {
 public:
  SftSplit(SftRows r, int pad) : r_(std::move(r)), pad_(pad) {
    kept_.reserve(r_.rows());
    for (std::size_t i = 0; i < r_.rows(); ++i) {
      kept_.push_back(static_cast<int>(
          std::count(r_.label.begin() + r_.begin[i], r_.label.begin() + r_.begin[i + 1], 1)));
    }
  }
  std::size_t rows() const override { return r_.rows(); }
  std::size_t examples() const override { return r_.rows(); }
  int length(std::size_t i) const override {
    return static_cast<int>(r_.begin[i + 1] - r_.begin[i]);
  }
  // inputs: the ids, then the padding token; targets: position t predicts id t+1 where it is a
  // label (transformers' shifted labels), else -1 (ignored), as is the padding.
  void Load(std::size_t i, int r, int T, model::Activations& a) const override {
    const std::size_t at = static_cast<std::size_t>(r) * T;
    Row(i, T, a.inputs + at, a.targets + at);
  }
  void Row(std::size_t i, int T, int* inputs, int* targets) const {
    const std::size_t b = r_.begin[i];
    const int n = std::min(length(i), T);
    for (int t = 0; t < T; ++t) {
      inputs[t] = t < n ? r_.ids[b + t] : pad_;
      targets[t] = t + 1 < n && r_.label[b + t + 1] ? r_.ids[b + t + 1] : -1;
    }
  }
  bool dynamic_padding() const override { return true; }
  int loss_labels(std::size_t i) const override { return kept_[i]; }
  const std::string& path() const override { return r_.path; }
  const char* unit() const override { return "examples"; }
  const SftRows& data() const { return r_; }

 private:
  SftRows r_;
  std::vector<int> kept_;
  int pad_;
};

// --packing: the rows packed into bins of max_length (PackBfd), each bin a row; each position's
// position id restarts at 0 with its document and it attends within its document only (what TRL's
// seq_lengths give flash attention, and transformers' masks from such position ids). The targets
// run across a bin's documents as TRL's flattened labels do (a document's last token predicts the
// next one's first where that is a label).
class PackedSplit final : public Split {
 public:
  PackedSplit(SftRows r, const std::vector<std::vector<std::size_t>>& bins, int pad)
      : r_(std::move(r)), pad_(pad) {
    for (const std::vector<std::size_t>& bin : bins) {
      Bin b;
      for (std::size_t i : bin) {
        b.docs.push_back(static_cast<int>(r_.begin[i + 1] - r_.begin[i]));
        b.ids.insert(b.ids.end(), r_.ids.begin() + r_.begin[i], r_.ids.begin() + r_.begin[i + 1]);
        b.label.insert(b.label.end(), r_.label.begin() + r_.begin[i],
                       r_.label.begin() + r_.begin[i + 1]);
      }
      b.kept = static_cast<int>(std::count(b.label.begin(), b.label.end(), 1));
      bins_.push_back(std::move(b));
    }
  }
  std::size_t rows() const override { return bins_.size(); }
  std::size_t examples() const override { return r_.rows(); }
  int length(std::size_t i) const override { return static_cast<int>(bins_[i].ids.size()); }
  void Load(std::size_t i, int r, int T, model::Activations& a) const override {
    const Bin& b = bins_[i];
    const std::size_t at = static_cast<std::size_t>(r) * T;
    const int n = std::min(length(i), T);
    a.UsePacking();
    Row(i, T, a.inputs + at, a.targets + at);
    for (int t = 0; t < T; ++t) {
      a.positions[at + t] = 0;
      a.doc_start[at + t] = t;  // the padding: each position attends to itself
    }
    int start = 0;
    for (int len : b.docs) {
      for (int t = start; t < std::min(start + len, n); ++t) {
        a.positions[at + t] = t - start;
        a.doc_start[at + t] = start;
      }
      start += len;
    }
  }
  void Row(std::size_t i, int T, int* inputs, int* targets) const {
    const Bin& b = bins_[i];
    const int n = std::min(length(i), T);
    for (int t = 0; t < T; ++t) {
      inputs[t] = t < n ? b.ids[t] : pad_;
      targets[t] = t + 1 < n && b.label[t + 1] ? b.ids[t + 1] : -1;
    }
  }
  bool dynamic_padding() const override { return true; }
  int loss_labels(std::size_t i) const override { return bins_[i].kept; }
  const std::string& path() const override { return r_.path; }
  const char* unit() const override { return "packed rows"; }
  // Bin i's documents' lengths (TRL's seq_lengths).
  const std::vector<int>& docs(std::size_t i) const { return bins_[i].docs; }

 private:
  struct Bin {
    std::vector<int32_t> ids;
    std::vector<uint8_t> label;
    std::vector<int> docs;
    int kept = 0;
  };
  SftRows r_;
  std::vector<Bin> bins_;
  int pad_;
};

// Row i of an sft split (plain or packed) as Load lays it: its T inputs and targets.
void RowTargets(const Split& split, std::size_t i, int T, int* inputs, int* targets) {
  if (const auto* s = dynamic_cast<const SftSplit*>(&split)) return s->Row(i, T, inputs, targets);
  static_cast<const PackedSplit&>(split).Row(i, T, inputs, targets);
}

// Every id of the rows and the padding id inside the model's vocabulary [0, V) (task.h): the
// rows name their place in the file when TokenizeSft kept one row per JSON row.
void CheckVocabulary(const SftRows& r, const std::vector<JsonRow>& rows, int V, int pad,
                     const data::Tokenizer& tokenizer) {
  if (V <= 0) return;
  for (std::size_t i = 0; i < r.rows(); ++i) {
    const std::int32_t *b = r.ids.data() + r.begin[i], *e = r.ids.data() + r.begin[i + 1];
    const std::int32_t* bad = OutsideVocabulary(b, e, V);
    if (bad == e) continue;
    RefuseTokenId(
        *bad, V, tokenizer,
        rows.size() == r.rows() ? rows[i].where : fmt::format("{}, row {}", r.path, i + 1));
  }
  if (pad >= V) RefuseTokenId(pad, V, tokenizer, "the padding token (the tokenizer's eos)");
}

// The prompts `predict` completes: each row's prompt ids and what predictions.jsonl echoes.
class PromptSplit final : public Split {
 public:
  std::size_t rows() const override { return prompts.size(); }
  std::size_t examples() const override { return prompts.size(); }
  int length(std::size_t i) const override { return static_cast<int>(prompts[i].size()); }
  void Load(std::size_t, int, int, model::Activations&) const override {
    CPUTRAIN_CHECK(false, "sft predict generates; it loads no rows");
  }
  const std::string& path() const override { return path_; }
  const char* unit() const override { return "prompts"; }

  std::string path_;
  std::vector<std::vector<int>> prompts;
  std::vector<Json> echo;  // the row's prompt (or messages less the answer)
  bool conversational = false;
};

struct SftFlags {
  SftOptions data;
  bool packing = false;
  int max_new_tokens = 256;
  double temperature = 0, top_p = 1;
  int top_k = 0;
};

class SftTask final : public Task {
 public:
  const TaskInfo& info() const override { return kInfo; }
  // TRL's SFTConfig: learning_rate 2e-5, max_length 1024.
  void Defaults(Args& args) const override {
    args.max_seq_length = 1024;
    args.lr = 2e-5;
  }
  std::string FlagAlias(const std::string& core_flag) const override {
    if (core_flag == "train_file" || core_flag == "test_file") return "dataset_path";
    if (core_flag == "validation_file") return "eval_dataset_path";
    if (core_flag == "max_seq_length") return "max_length";
    return "";
  }
  std::vector<Option> Options() override;
  void CheckFlags(const Args& args, Command command) override;
  model::HeadSpec ModelHead() const override { return model::Head::kLm; }
  void CheckModel(const model::Shape& s, const Args& args) override {
    vocab_ = {s.V, s.Vp};
    if (!s.encoder()) return;
    throw InputError(fmt::format("--model_name_or_path '{}' is a {} model, an encoder: sft "
                                 "fine-tunes a decoder",
                                 args.model, model::FamilyOf(s.arch).name),
                     "give a decoder's directory (Llama, Qwen2, Qwen3, Mistral, Gemma 3, Phi-3)");
  }
  void OpenTokenizer(const Args& args) override;
  std::unique_ptr<Split> Read(SplitKind kind, const Args& args) override;
  model::HeadSpec Head(const model::Shape&, Command) const override { return model::Head::kLm; }
  bool streams_logits() const override { return true; }
  void OnLogits(const Split& split, std::size_t row, std::size_t j, const float* logits,
                int T) override;
  Outcome Finish(SplitKind kind, const Split& split, const Logits&, const Args&) override;
  bool generates() const override { return true; }
  Outcome Generate(const Split& split, const GenerationModel& m, const Args& args) override;

 private:
  std::unique_ptr<Split> ReadPrompts(const std::vector<JsonRow>& rows, const std::string& path);
  SftFlags o_;
  // The eval pass's sums per micro-batch: the loss and the correct argmax over the kept targets,
  // their number, the rows.
  struct EvalBatch {
    double loss = 0;
    std::size_t correct = 0, targets = 0, rows = 0;
  };
  std::vector<EvalBatch> eval_;
  std::pair<int, int> vocab_ = {0, 0};  // V, Vp: the logits' real columns and row stride
  std::unique_ptr<data::Tokenizer> tokenizer_;
  std::unique_ptr<chat::ChatTemplate> chat_;
  SftTokenizing tk_;
};

std::vector<Option> SftTask::Options() {
  constexpr auto kTrain = static_cast<unsigned>(Command::kTrain);
  constexpr auto kPredict = static_cast<unsigned>(Command::kPredict);
  return {
      {"completion_only_loss",
       "prompt-completion data: the loss on the completion's tokens only (TRL's default; "
       "--completion_only_loss=false trains on the prompt too)",
       &o_.data.completion_only_loss, kTrain},
      {"assistant_only_loss",
       "conversational data: the loss on the assistant's tokens only, the chat template's "
       "{% generation %} blocks (a template without them is refused, as TRL does)",
       &o_.data.assistant_only_loss, kTrain},
      {"packing",
       "pack the rows into rows of --max_length, best fit decreasing (TRL's packing_strategy "
       "bfd); each document's positions restart at 0 and it attends within itself only",
       &o_.packing, kTrain},
      {"max_new_tokens", "the most tokens generated per prompt", &o_.max_new_tokens, 1, 1 << 20,
       kPredict},
      {"temperature", "0: greedy; higher: sample from softmax(logits / temperature)",
       &o_.temperature, 0, 100, kPredict},
      {"top_k", "sample among the k most likely tokens (0: all)", &o_.top_k, 0, 1 << 30, kPredict},
      {"top_p", "nucleus sampling: the smallest set of probability >= p (1: off)", &o_.top_p, 0, 1,
       kPredict},
  };
}

void SftTask::CheckFlags(const Args& args, Command command) {
  o_.data.max_length = args.max_seq_length;
  if (command != Command::kTrain) return;
}

// The tokenizer, the chat template if the directory has a usable one (else why not, for the
// rows that need one), the special tokens' text.
void SftTask::OpenTokenizer(const Args& args) {
  const std::string dir = args.tokenizer.empty() ? args.model : args.tokenizer;
  tokenizer_ = data::MakeTokenizer(dir);
  tk_ = {};
  tk_.tokenizer = tokenizer_.get();
  std::error_code ec;
  if (fs::is_directory(dir, ec)) {
    tk_.special = chat::SpecialTokenVariables(dir);
    try {
      chat_ = std::make_unique<chat::ChatTemplate>(chat::LoadChatTemplate(dir));
      tk_.chat = chat_.get();
    } catch (const InputError& e) {
      tk_.template_problem = fmt::format("its chat template cannot be used: {}", e.what());
    }
  } else {
    tk_.special = Json::object();
    tk_.template_problem = fmt::format("'{}' is a file, not a directory with a chat template", dir);
  }
  if (tk_.special.contains("eos_token") && tk_.special["eos_token"].is_string())
    tk_.eos_text = tk_.special["eos_token"].get<std::string>();
  if (o_.data.assistant_only_loss && tk_.chat && !tk_.chat->has_generation_blocks()) {
    throw InputError(
        fmt::format("--assistant_only_loss needs a chat template with {{% generation %}} blocks "
                    "around the assistant's text; {} has none",
                    tk_.chat->source()),
        "use a template that marks them (docs/sft.md), or leave out --assistant_only_loss");
  }
}

std::unique_ptr<Split> SftTask::Read(SplitKind kind, const Args& args) {
  const std::string flag =
      kind == SplitKind::kValidation ? "--eval_dataset_path" : "--dataset_path";
  const std::vector<JsonRow> rows = ReadJsonRows(args.File(kind), flag, args.Limit(kind));
  if (kind == SplitKind::kTest) return ReadPrompts(rows, args.File(kind));
  SftRows r = TokenizeSft(rows, args.File(kind), flag, tk_, o_.data);
  std::size_t kept = std::count(r.label.begin(), r.label.end(), 1);
  log::Info("{}: {} {} rows, {} tokens, {} of them labels (max_length {})", r.path, r.rows(),
            SftFormName(r.form), r.ids.size(), kept, o_.data.max_length);
  std::vector<std::vector<std::size_t>> bins;  // TRL's eval_packing follows packing
  if (o_.packing) {
    bins = PackBfd(r, o_.data.max_length);
  } else {
    for (std::size_t i = 0; i < r.rows(); ++i) bins.push_back({i});
  }
  const SftUntrained untrained = CheckSftTargets(r, bins, flag, o_.data.max_length);
  if (untrained.rows > 0) {
    log::Warn(
        "{} of {} rows of {} have no label within --max_length {} (the first: {}): they add "
        "nothing to the loss, as in TRL; raise --max_length to {} them",
        untrained.rows, r.rows(), r.path, o_.data.max_length, untrained.first,
        kind == SplitKind::kValidation ? "evaluate" : "train on");
  }
  const int eos = tokenizer_->eos_token(), pad = eos >= 0 ? eos : 0;
  CheckVocabulary(r, rows, vocab_.first, pad, *tokenizer_);
  if (o_.packing) {
    auto packed = std::make_unique<PackedSplit>(std::move(r), bins, pad);
    log::Info("packed into {} rows of at most {} tokens (best fit decreasing)", packed->rows(),
              o_.data.max_length);
    return packed;
  }
  return std::make_unique<SftSplit>(std::move(r), pad);
}

std::unique_ptr<Split> SftTask::ReadPrompts(const std::vector<JsonRow>& rows,
                                            const std::string& path) {
  auto s = std::make_unique<PromptSplit>();
  s->path_ = path;
  for (const JsonRow& r : rows) {
    // A prompt alone (a completion, if given, is ignored) or a chat less its final answers.
    Json row = r.value;
    if (row.contains("prompt") && !row.contains("completion")) {
      row["completion"] = row["prompt"].is_array()
                              ? Json::array({Json{{"role", "assistant"}, {"content", ""}}})
                              : Json("");
    }
    const SftForm f = FormOf(row, r.where);
    Json prompt;
    if (f == SftForm::kMessages) {  // the conversation less its final answer
      prompt = row["messages"];
      while (!prompt.empty() && prompt.back()["role"] == "assistant")
        prompt.erase(prompt.size() - 1);
    } else if (f != SftForm::kText) {
      prompt = row["prompt"];
    } else {
      throw InputError(
          fmt::format("{}: sft predict completes prompts; the row is plain text", r.where),
          "give rows with \"prompt\" (a string or messages) or \"messages\"");
    }
    const bool conv = prompt.is_array();
    if (conv && prompt.empty()) {
      throw InputError(fmt::format("{} has only assistant messages", r.where),
                       "start the conversation with a user message");
    }
    if (conv && !tk_.chat)
      throw InputError(fmt::format("{} is a chat, but {}", r.where, tk_.template_problem),
                       "use a tokenizer with a chat template");
    std::vector<int> ids;
    if (conv) {
      // The row's template call as training renders it, with the generation prompt.
      chat::ChatCall call = chat::MakeChatCall(
          tk_.special, prompt, r.value.contains("tools") ? r.value["tools"] : Json(nullptr),
          r.value.contains("chat_template_kwargs") ? r.value["chat_template_kwargs"]
                                                   : Json(nullptr),
          true, r.where);
      call.variables["add_generation_prompt"] = true;
      ids = chat::ApplyChatTemplate(*tk_.chat, *tokenizer_, call.variables, false, r.where,
                                    call.chat_template ? &*call.chat_template : nullptr)
                .ids;
    } else {
      tokenizer_->EncodeWithSpecial(prompt.get<std::string>(), &ids);
    }
    s->conversational = conv;
    s->prompts.push_back(std::move(ids));
    s->echo.push_back(std::move(prompt));
  }
  return s;
}

// Row `row` of micro-batch j: each kept target's cross-entropy (log-sum-exp over the real
// vocabulary, in double) and whether the argmax is it, as TRL's eval step computes its loss and
// mean_token_accuracy.
void SftTask::OnLogits(const Split& split, std::size_t row, std::size_t j, const float* logits,
                       int T) {
  if (eval_.size() <= j) eval_.resize(j + 1);
  EvalBatch& e = eval_[j];
  e.rows += 1;
  const auto [V, Vp] = vocab_;
  std::vector<int> inputs(static_cast<std::size_t>(T)), targets(static_cast<std::size_t>(T));
  RowTargets(split, row, T, inputs.data(), targets.data());
  for (int t = 0; t < T; ++t) {
    if (targets[t] < 0) continue;
    const float* x = logits + static_cast<std::size_t>(t) * Vp;
    const int best = static_cast<int>(std::max_element(x, x + V) - x);
    const float mx = x[best];
    double sum = 0;
    for (int v = 0; v < V; ++v) sum += std::exp(static_cast<double>(x[v]) - mx);
    e.loss += mx + std::log(sum) - x[targets[t]];
    e.correct += best == targets[t] ? 1 : 0;
    e.targets += 1;
  }
}

// The eval metrics as the Trainer reports them: eval_loss the mean of each batch's mean loss over
// its kept targets, weighted by the batch's rows (evaluation_loop repeats each batch's loss
// batch-size times, the packed rows of a padding-free batch too); mean_token_accuracy the plain
// mean over batches (TRL's logged metric).
Outcome SftTask::Finish(SplitKind kind, const Split& split, const Logits&, const Args&) {
  CPUTRAIN_CHECK(kind == SplitKind::kValidation, "sft predicts by generating");
  double loss = 0, accuracy = 0;
  std::size_t rows = 0, batches = 0;
  for (const EvalBatch& e : eval_) {
    if (e.targets == 0) continue;
    loss += e.loss / static_cast<double>(e.targets) * static_cast<double>(e.rows);
    accuracy += static_cast<double>(e.correct) / static_cast<double>(e.targets);
    rows += e.rows;
    batches += 1;
  }
  eval_.clear();
  Outcome o;
  o.metrics = {{"loss", rows ? loss / static_cast<double>(rows) : 0.0},
               {"mean_token_accuracy", batches ? accuracy / static_cast<double>(batches) : 0.0},
               {"samples", split.rows()}};
  o.printed = fmt::format("eval_loss {:.6f}, eval_mean_token_accuracy {:.4f} over {} {}\n",
                          o.metrics[0].second.get<double>(), o.metrics[1].second.get<double>(),
                          split.rows(), split.unit());
  return o;
}

Outcome SftTask::Generate(const Split& split, const GenerationModel& m, const Args& args) {
  const auto& p = static_cast<const PromptSplit&>(split);
  model::Decoder dec(m.pool, m.layout, m.params);
  model::Sampler sampler(static_cast<float>(o_.temperature), o_.top_k, args.seed,
                         static_cast<float>(o_.top_p));
  const int V = m.layout.shape().V, eos = tokenizer_->eos_token();
  std::string out;
  std::size_t generated = 0;
  for (std::size_t i = 0; i < p.rows(); ++i) {
    const std::vector<int>& prompt = p.prompts[i];
    if (prompt.empty()) {  // an empty text, or a template that renders nothing
      throw InputError(fmt::format("{}: prompt {} has no tokens, so there is nothing to continue",
                                   p.path(), i + 1),
                       "give the row a non-empty prompt");
    }
    if (static_cast<int>(prompt.size()) >= dec.max_positions()) {
      throw InputError(fmt::format("{}: prompt {} has {} tokens; the model reads {}", p.path(),
                                   i + 1, prompt.size(), dec.max_positions()),
                       "shorten the prompt");
    }
    dec.Reset();
    const float* logits = nullptr;
    for (int id : prompt) logits = dec.Feed(id);
    std::vector<int> ids;
    while (static_cast<int>(ids.size()) < o_.max_new_tokens &&
           dec.position() < dec.max_positions()) {
      const int next = sampler.Next(logits, V);
      if (next == eos) break;
      ids.push_back(next);
      if (dec.position() == dec.max_positions()) break;
      logits = dec.Feed(next);
    }
    generated += ids.size();
    const std::string text = tokenizer_->Decode(ids.data(), ids.size());
    Json row;
    row["prompt"] = p.echo[i];
    if (p.conversational) {
      row["completion"] = Json::array({Json{{"role", "assistant"}, {"content", text}}});
    } else {
      row["completion"] = text;
    }
    out += row.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
  }
  const std::string file = (fs::path(args.output_dir) / "predictions.jsonl").string();
  WriteFileAtomic(file, out);
  Outcome o;
  o.printed = fmt::format("wrote {} completions ({} tokens) to {}\n", p.rows(), generated, file);
  return o;
}

}  // namespace

std::unique_ptr<Task> MakeSftTask() { return std::make_unique<SftTask>(); }

}  // namespace cputrain::task
