#include "train/run_outputs.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>

#include "common/error.h"
#include "common/files.h"
#include "common/log.h"

namespace cputrain::train {

namespace {

// The rows of `text` (metrics.jsonl) of steps up to `step`, whole lines only.
std::string RowsThrough(const std::string& text, int step) {
  std::string kept;
  std::size_t at = 0;
  for (std::size_t nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1) {
    const std::string line = text.substr(at, nl - at);
    const nlohmann::json row = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    // A task's evaluation after training is made again by the resumed run (train/reports.h).
    if (row.is_object() && row.value("step", step + 1) <= step && !IsTaskEvalRow(row)) {
      kept += line + "\n";
    }
  }
  return kept;
}

}  // namespace

MetricsFile::MetricsFile(std::string path, int keep_through_step) : path_(std::move(path)) {
  std::error_code ec;
  if (keep_through_step >= 0 && std::filesystem::exists(path_, ec)) {
    WriteFileAtomic(path_, RowsThrough(ReadFile(path_), keep_through_step));
  }
  file_ = std::make_unique<RecordFile>(path_, keep_through_step < 0,
                                       "check free disk space in train.out_dir");
}

MetricsFile::~MetricsFile() = default;

void MetricsFile::Write(const nlohmann::json& row) { file_->Append(row.dump() + "\n"); }

namespace {

bool ShowBar(Progress p) {
  return p == Progress::kBar || (p == Progress::kAuto && isatty(STDERR_FILENO));
}

}  // namespace

RunOutputs::RunOutputs(const Config& config, bool writer, Progress progress)
    : writer_(writer),
      dir_(config.train.out_dir),
      config_(config),
      keep_(config.train.keep_checkpoints),
      progress_(config.train.steps, ShowBar(progress), progress == Progress::kQuiet || !writer) {
  if (!writer_) return;
  MakeDirs(dir_);
  lock_ = std::make_unique<RunLock>(dir_);
  RemoveTemporaries(dir_);
  checkpoints_ = std::make_unique<CheckpointWriter>(dir_, keep_);
}

RunOutputs::~RunOutputs() = default;

void RunOutputs::WritePlacement(const nlohmann::json& placement) {
  if (!writer_) return;
  WriteFileAtomic(dir_ + "/config.yaml", ConfigToYaml(config_));
  WriteFileAtomic(dir_ + "/placement.json", placement.dump(2) + "\n");
}

void RunOutputs::BeginTraining(int resumed_step, bool fresh) {
  if (!writer_) return;
  // Resumed from an older checkpoint (train.resume: PATH): what came after it is abandoned.
  if (resumed_step >= 0) RemoveCheckpointsAfter(dir_, resumed_step);
  if (fresh) RemoveCheckpointsAfter(dir_, 0);  // every step directory, and `latest`
  metrics_ = std::make_unique<MetricsFile>(dir_ + "/metrics.jsonl", resumed_step);
  reports_ = std::make_unique<RunReports>(config_, resumed_step);
  reports_->SaveState();
}

void RunOutputs::Step(const StepRecord& rec) {
  if (checkpoints_) checkpoints_->ThrowIfFailed();  // a background save that failed: stop now
  if (metrics_) {
    nlohmann::json row = {{"step", rec.step},
                          {"loss", rec.loss},
                          {"lr", rec.lr},
                          {"grad_norm", rec.grad_norm},
                          {"tokens_per_s", rec.tokens_per_s},
                          {"ms", rec.ms},
                          {"forward_ms", rec.forward_ms},
                          {"backward_ms", rec.backward_ms},
                          {"comm_ms", rec.comm_ms},
                          {"optimizer_ms", rec.optimizer_ms},
                          {"tokens", rec.tokens},
                          {"epoch", rec.epoch},
                          {"time", rec.time_s}};
    if (rec.skipped) row.update({{"skipped", true}, {"skipped_steps", rec.skipped_steps}});
    metrics_->Write(row);
    reports_->Row(row);
  }
  progress_.Step(rec.step, rec.loss, rec.tokens_per_s, rec.lr, rec.tokens, rec.epoch);
}

void RunOutputs::Eval(const EvalRecord& rec) {
  if (metrics_) {
    const nlohmann::json row = {{"step", rec.step}, {"val_loss", rec.val_loss}};
    metrics_->Write(row);
    reports_->Row(row);
  }
  progress_.Eval(rec.step, rec.val_loss);
}

std::string RunOutputs::SaveCheckpoint(const CheckpointContents& c, bool background) {
  if (!writer_) return "";
  const float* p = c.params;
  const std::size_t n = c.layout->total();
  const std::size_t bad = model::FirstNonFinite(p, n);
  if (bad < n) {
    throw RuntimeError(
        fmt::format("parameter {} ({}) is {} after step {}: not saving a broken model", bad,
                    model::DescribeParam(*c.layout, bad), p[bad], c.state.step),
        "the last good checkpoint is untouched; lower optim.lr or set optim.grad_clip");
  }
  const auto t0 = std::chrono::steady_clock::now();
  const std::string previous = checkpoints_->Wait();
  if (!previous.empty()) progress_.Message(previous);
  // trainer_state.json before the checkpoint starts: a background save filling the disk must not
  // race this small write, so on a full disk the error names the checkpoint's file.
  if (reports_) reports_->SaveState();
  const auto t1 = std::chrono::steady_clock::now();
  const std::string dir = background ? checkpoints_->SaveInBackground(c) : checkpoints_->Save(c);
  const auto secs = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
  const auto t2 = std::chrono::steady_clock::now();
  const double mb =  // weights and the optimizer's state
      static_cast<double>(c.layout->total() + c.optimizer.floats()) * sizeof(float) / 1e6;
  const std::string waited =
      previous.empty() ? ""
                       : fmt::format(" ({:.2f} s waiting for the previous save)", secs(t0, t1));
  progress_.Message(background
                        ? fmt::format("saving {}: training paused {:.2f} s for the snapshot{}", dir,
                                      secs(t1, t2), waited)
                        : fmt::format("saved {} in {:.2f} s ({:.0f} MB/s){}", dir, secs(t1, t2),
                                      mb / secs(t1, t2), waited));
  return dir;
}

void RunOutputs::ReserveSnapshot(std::size_t floats) {
  if (!writer_) return;
  const double secs = checkpoints_->Reserve(floats);
  log::Info("checkpoint snapshot: {:.2f} GB reserved in {:.2f} s (periodic saves copy into it)",
            static_cast<double>(floats) * sizeof(float) / 1e9, secs);
}

void RunOutputs::Message(const std::string& line) { progress_.Message(line); }

void RunOutputs::Finish() {
  if (reports_) reports_->SaveState();
  if (checkpoints_) {
    const std::string previous = checkpoints_->Wait();
    if (!previous.empty()) progress_.Message(previous);
  }
  progress_.Finish();
}

}  // namespace cputrain::train
