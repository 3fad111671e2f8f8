// train/run_outputs: what a run leaves in train.out_dir and shows on stderr — config.yaml (the
// effective config), placement.json (the plan and where the memory is), metrics.jsonl (a JSON
// object per step and per evaluation), model.bin (an llm.c checkpoint), and the progress
// display. Only the writer process (rank 0) touches out_dir or the terminal; on the others
// every call is a no-op, so the main loop reads the same on every rank.
//
// Thread safety: main thread only.
#pragma once

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "config/config.h"
#include "model/gpt2.h"
#include "train/progress.h"
#include "train/trainer.h"

namespace cputrain::train {

// metrics.jsonl: one JSON object per line, each written with one call and flushed, so a reader
// (or a crash) never sees half a line.
class MetricsFile {
 public:
  // Truncates `path`. Throws InputError if it cannot be created.
  explicit MetricsFile(std::string path);
  ~MetricsFile();
  MetricsFile(const MetricsFile&) = delete;
  MetricsFile& operator=(const MetricsFile&) = delete;
  // Throws RuntimeError naming the file if the line cannot be written whole.
  void Write(const nlohmann::json& row);

 private:
  std::string path_;
  std::FILE* f_;
};

class RunOutputs {
 public:
  // Creates out_dir and writes config.yaml (writer only).
  RunOutputs(const Config& config, bool writer, Progress progress);
  ~RunOutputs();

  bool writer() const { return writer_; }
  const std::string& dir() const { return dir_; }
  void WritePlacement(const nlohmann::json& placement);
  // Opens metrics.jsonl (truncating it): called once the run is about to train, so that a
  // refused start leaves the previous run's metrics alone.
  void BeginTraining();
  void Step(const StepRecord& rec);
  void Eval(const EvalRecord& rec);
  // Saves the parameters as out_dir/model.bin (atomically: the old file or the new one).
  void SaveCheckpoint(const model::ParamLayout& layout, const float* params);
  void Message(const std::string& line);
  void Finish();

 private:
  const bool writer_;
  const std::string dir_;
  std::unique_ptr<MetricsFile> metrics_;
  ProgressDisplay progress_;
};

}  // namespace cputrain::train
