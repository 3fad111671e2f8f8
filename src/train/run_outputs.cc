#include "train/run_outputs.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
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
    if (row.is_object() && row.value("step", step + 1) <= step) kept += line + "\n";
  }
  return kept;
}

}  // namespace

MetricsFile::MetricsFile(std::string path, int keep_through_step) : path_(std::move(path)) {
  std::error_code ec;
  if (keep_through_step >= 0 && std::filesystem::exists(path_, ec)) {
    WriteFileAtomic(path_, RowsThrough(ReadFile(path_), keep_through_step));
  }
  const int flags =
      O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (keep_through_step < 0 ? O_TRUNC : 0);
  fd_ = ::open(path_.c_str(), flags, 0644);
  if (fd_ < 0) {
    const int err = errno;
    ThrowWriteError(fmt::format("cannot write '{}': {}", path_, std::strerror(err)), err, path_,
                    "check free disk space in train.out_dir");
  }
  size_ = ::lseek(fd_, 0, SEEK_END);
}

MetricsFile::~MetricsFile() {
  if (fd_ >= 0) ::close(fd_);
}

void MetricsFile::Write(const nlohmann::json& row) {
  const std::string line = row.dump() + "\n";
  // One write(2) a line; a short one (the disk filled up in the middle of the line) has no
  // errno, so the rest is written again: that gets the reason (ENOSPC: "No space left on
  // device"), or the rest of the line if room came back.
  std::size_t done = 0;
  ssize_t n = 0;
  while (done < line.size() && (n = ::write(fd_, line.data() + done, line.size() - done)) > 0) {
    done += static_cast<std::size_t>(n);
  }
  if (done == line.size()) {
    size_ += static_cast<off_t>(done);
    return;
  }
  const int err = n < 0 ? errno : ENOSPC;  // 0 bytes written: no room either
  if (::ftruncate(fd_, size_) != 0) {
    // Could not cut the torn line: a resumed run drops it when it rewrites the file.
  }
  ThrowWriteError(fmt::format("writing '{}' failed: {}", path_, std::strerror(err)), err, path_,
                  "check free disk space");
}

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
  }
  progress_.Step(rec.step, rec.loss, rec.tokens_per_s, rec.lr, rec.tokens, rec.epoch);
}

void RunOutputs::Eval(const EvalRecord& rec) {
  if (metrics_) metrics_->Write({{"step", rec.step}, {"val_loss", rec.val_loss}});
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
  const auto t1 = std::chrono::steady_clock::now();
  const std::string dir = background ? checkpoints_->SaveInBackground(c) : checkpoints_->Save(c);
  const auto secs = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
  const auto t2 = std::chrono::steady_clock::now();
  const double mb = 3.0 * c.layout->total() * sizeof(float) / 1e6;  // weights, m, v
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

void RunOutputs::ReserveSnapshot(std::size_t params) {
  if (!writer_) return;
  const double secs = checkpoints_->Reserve(params);
  log::Info("checkpoint snapshot: {:.2f} GB reserved in {:.2f} s (periodic saves copy into it)",
            3.0 * params * sizeof(float) / 1e9, secs);
}

void RunOutputs::Message(const std::string& line) { progress_.Message(line); }

void RunOutputs::Finish() {
  if (checkpoints_) {
    const std::string previous = checkpoints_->Wait();
    if (!previous.empty()) progress_.Message(previous);
  }
  progress_.Finish();
}

}  // namespace cputrain::train
