#include "train/run_outputs.h"

#include <fmt/format.h>
#include <unistd.h>

#include "common/error.h"
#include "common/files.h"
#include "model/checkpoint.h"

namespace cputrain::train {

MetricsFile::MetricsFile(std::string path)
    : path_(std::move(path)), f_(std::fopen(path_.c_str(), "w")) {
  if (!f_) throw InputError(fmt::format("cannot write '{}'", path_), "check train.out_dir");
}

MetricsFile::~MetricsFile() {
  if (f_) std::fclose(f_);
}

void MetricsFile::Write(const nlohmann::json& row) {
  const std::string line = row.dump() + "\n";
  if (std::fwrite(line.data(), 1, line.size(), f_) != line.size() || std::fflush(f_) != 0) {
    throw RuntimeError(fmt::format("writing '{}' failed", path_), "check free disk space");
  }
}

namespace {

bool ShowBar(Progress p) {
  return p == Progress::kBar || (p == Progress::kAuto && isatty(STDERR_FILENO));
}

}  // namespace

RunOutputs::RunOutputs(const Config& config, bool writer, Progress progress)
    : writer_(writer),
      dir_(config.train.out_dir),
      progress_(config.train.steps, ShowBar(progress), progress == Progress::kQuiet || !writer) {
  if (!writer_) return;
  MakeDirs(dir_);
  WriteFileAtomic(dir_ + "/config.yaml", ConfigToYaml(config));
}

RunOutputs::~RunOutputs() = default;

void RunOutputs::WritePlacement(const nlohmann::json& placement) {
  if (writer_) WriteFileAtomic(dir_ + "/placement.json", placement.dump(2) + "\n");
}

void RunOutputs::BeginTraining() {
  if (writer_) metrics_ = std::make_unique<MetricsFile>(dir_ + "/metrics.jsonl");
}

void RunOutputs::Step(const StepRecord& rec) {
  if (metrics_) {
    metrics_->Write({{"step", rec.step},
                     {"loss", rec.loss},
                     {"lr", rec.lr},
                     {"grad_norm", rec.grad_norm},
                     {"tokens_per_s", rec.tokens_per_s},
                     {"ms", rec.ms},
                     {"forward_ms", rec.forward_ms},
                     {"backward_ms", rec.backward_ms},
                     {"comm_ms", rec.comm_ms},
                     {"optimizer_ms", rec.optimizer_ms}});
  }
  progress_.Step(rec.step, rec.loss, rec.tokens_per_s, rec.lr);
}

void RunOutputs::Eval(const EvalRecord& rec) {
  if (metrics_) metrics_->Write({{"step", rec.step}, {"val_loss", rec.val_loss}});
  progress_.Eval(rec.step, rec.val_loss);
}

void RunOutputs::SaveCheckpoint(const model::ParamLayout& layout, const float* params) {
  if (writer_) model::SaveCheckpoint(dir_ + "/model.bin", layout, params);
}

void RunOutputs::Message(const std::string& line) { progress_.Message(line); }

void RunOutputs::Finish() { progress_.Finish(); }

}  // namespace cputrain::train
