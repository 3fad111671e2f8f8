#include "train/reports.h"

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "common/files.h"
#include "report/tensorboard.h"

namespace cputrain::train {
namespace {

using nlohmann::json;

// (metrics.jsonl key, Hugging Face's log key) of a training step's row, in HF's entry order.
const std::vector<std::pair<const char*, const char*>> kStepKeys = {
    {"epoch", "epoch"}, {"grad_norm", "grad_norm"}, {"lr", "learning_rate"}, {"loss", "loss"}};

bool IsNumber(const json& row, const char* key) {
  return row.contains(key) && row[key].is_number();
}

// The TensorBoard scalars of a row, under TensorBoardCallback's tags (its rewrite_logs: eval_x
// becomes eval/x, anything else train/x).
std::vector<std::pair<std::string, float>> Scalars(const json& row) {
  std::vector<std::pair<std::string, float>> out;
  auto add = [&](const std::string& tag, const char* key) {
    if (IsNumber(row, key)) out.emplace_back(tag, row[key].get<float>());
  };
  for (const auto& [ours, hf] : kStepKeys) add(std::string("train/") + hf, ours);
  add("train/tokens_per_second", "tokens_per_s");
  add("eval/loss", "val_loss");
  for (const auto& [key, value] : row.items()) {
    if (key.rfind("eval_", 0) == 0) add("eval/" + key.substr(5), key.c_str());
  }
  return out;
}

// The trainer_state.json log entry of a row; `last_step` supplies an evaluation's epoch.
json LogEntry(const json& row, const json& last_step) {
  json e = json::object();
  if (row.contains("loss")) {
    for (const auto& [ours, hf] : kStepKeys)
      if (row.contains(ours)) e[hf] = row[ours];
  } else {
    if (last_step.contains("epoch")) e["epoch"] = last_step["epoch"];
    if (row.contains("val_loss")) e["eval_loss"] = row["val_loss"];
    for (const auto& [key, value] : row.items())
      if (key.rfind("eval_", 0) == 0) e[key] = value;
  }
  e["step"] = row.value("step", 0);
  return e;
}

std::vector<json> ReadRows(const std::string& path) {
  std::vector<json> rows;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return rows;
  std::istringstream in(ReadFile(path));
  for (std::string line; std::getline(in, line);) {
    json row = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (row.is_object()) rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace

bool IsTaskEvalRow(const json& row) {
  for (const auto& [key, value] : row.items())
    if (key.rfind("eval_", 0) == 0) return true;
  return false;
}

bool ReportsToTensorBoard(const Config& c) {
  const std::vector<std::string>& r = c.train.report_to;
  return std::find(r.begin(), r.end(), "tensorboard") != r.end() ||
         std::find(r.begin(), r.end(), "all") != r.end();
}

RunReports::RunReports(const Config& c, int resumed_step) : config_(c) {
  const std::string dir = c.train.out_dir;
  if (resumed_step >= 0 || resumed_step == kAppend) {
    for (const json& row : ReadRows(dir + "/metrics.jsonl")) {
      if (row.contains("loss")) last_step_row_ = row;
      log_history_.push_back(LogEntry(row, last_step_row_));
    }
  }
  if (!ReportsToTensorBoard(c)) return;
  report::EventFileWriter::Keep keep;  // null: a fresh run's new file
  if (resumed_step == kAppend) {
    keep = [](const report::Event&) { return true; };
  } else if (resumed_step >= 0) {
    // As metrics.jsonl: steps up to the checkpoint, without a task's evaluation (eval/<metric>
    // other than eval/loss), which the resumed run makes again.
    keep = [resumed_step](const report::Event& e) {
      for (const auto& [tag, value] : e.scalars)
        if (tag.rfind("eval/", 0) == 0 && tag != "eval/loss") return false;
      return e.step <= resumed_step;
    };
  }
  events_ = std::make_unique<report::EventFileWriter>(dir + "/" + kEventFile, keep);
}

RunReports::~RunReports() = default;

void RunReports::Row(const json& row) {
  if (row.contains("loss")) last_step_row_ = row;
  log_history_.push_back(LogEntry(row, last_step_row_));
  if (events_) events_->Scalars(row.value("step", 0), Scalars(row));
}

void RunReports::SaveState() {
  const json& last = last_step_row_;
  const json state = {
      {"best_metric", nullptr},
      {"best_model_checkpoint", nullptr},
      {"epoch", last.value("epoch", 0)},
      {"eval_steps", config_.train.eval_every},
      {"global_step", log_history_.empty() ? 0 : log_history_.back().value("step", 0)},
      {"is_hyper_param_search", false},
      {"is_local_process_zero", true},
      {"is_world_process_zero", true},
      {"log_history", log_history_},
      {"logging_steps", 1},
      {"max_steps", config_.train.steps},
      {"num_input_tokens_seen", last.value("tokens", 0)},
      {"save_steps", config_.train.checkpoint_every},
      {"train_batch_size", config_.data.batch_size}};
  WriteFileAtomic(config_.train.out_dir + "/" + kTrainerStateFile, state.dump(2) + "\n");
}

void ReportEvalMetrics(const Config& c, int step, const json& metrics) {
  RunReports reports(c, RunReports::kAppend);
  json row = {{"step", step}};
  row.update(metrics);
  RecordFile(c.train.out_dir + "/metrics.jsonl", false, "check free disk space in --output_dir")
      .Append(row.dump() + "\n");
  reports.Row(row);
  reports.SaveState();
}

}  // namespace cputrain::train
