// train/run_outputs: what a run leaves in train.out_dir and shows on stderr — config.yaml (the
// effective config), placement.json (the plan and where the memory is), metrics.jsonl (a JSON
// object per step and per evaluation) and what is made from its rows (train/reports.h:
// trainer_state.json, train.report_to's TensorBoard event file), checkpoints/
// (train/checkpoint_dir.h), and the progress display. The writer holds out_dir's run lock
// (train/run_lock.h) from construction on. Only the writer process (rank 0) touches out_dir or the
// terminal; on the others every call is a no-op, so the main loop reads the same on every rank.
//
// Thread safety: main thread only.
#pragma once

#include <sys/types.h>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "common/files.h"
#include "config/config.h"
#include "model/transformer.h"
#include "train/checkpoint_dir.h"
#include "train/checkpoint_writer.h"
#include "train/progress.h"
#include "train/reports.h"
#include "train/run_lock.h"
#include "train/trainer.h"

namespace cputrain::train {

// metrics.jsonl: one JSON object per line, each appended with one write(2); a write that fails
// part way is cut back to the last whole line, so the file only ever holds whole lines.
class MetricsFile {
 public:
  // keep_through_step < 0: truncates `path`. Otherwise keeps the rows of steps up to
  // keep_through_step (a resumed run) and appends after them; a torn last line is dropped.
  // Throws InputError naming the file if it cannot be opened.
  MetricsFile(std::string path, int keep_through_step);
  ~MetricsFile();
  MetricsFile(const MetricsFile&) = delete;
  MetricsFile& operator=(const MetricsFile&) = delete;
  // Throws RuntimeError naming the file and the reason if the line cannot be written whole.
  void Write(const nlohmann::json& row);

 private:
  std::string path_;
  std::unique_ptr<RecordFile> file_;
};

class RunOutputs {
 public:
  // Creates out_dir, takes its run lock and removes the temporaries of a dead run (writer
  // only). Throws InputError if another run holds the lock.
  RunOutputs(const Config& config, bool writer, Progress progress);
  ~RunOutputs();

  bool writer() const { return writer_; }
  const std::string& dir() const { return dir_; }
  // Waits for a background save: every checkpoint is complete once it returns.
  void Finish();
  // Writes config.yaml and placement.json.
  void WritePlacement(const nlohmann::json& placement);
  // Opens metrics.jsonl: called once the run is about to train, so that a refused start leaves
  // the previous run's metrics alone. resumed_step >= 0: keeps its rows and checkpoints up to
  // that step, removes those after it. fresh (TrainOptions::overwrite): a new run in an out_dir
  // that may hold an old one; its checkpoints and metrics are removed.
  void BeginTraining(int resumed_step, bool fresh = false);
  void Step(const StepRecord& rec);
  void Eval(const EvalRecord& rec);
  // Saves the checkpoint directory of c.state.step (train/checkpoint_dir.h) and returns it
  // (writer; "" elsewhere): from a snapshot on a background thread (train/checkpoint_writer.h)
  // or, for the run's last save, right here. Throws RuntimeError if the parameters are not
  // finite (a broken model is never saved) or if the previous background save failed.
  std::string SaveCheckpoint(const CheckpointContents& c, bool background);
  // Periodic saves ahead: allocates and faults in their snapshot of `floats` floats (weights and
  // optimizer state) now (train/checkpoint_writer.h), and says so.
  void ReserveSnapshot(std::size_t floats);
  void Message(const std::string& line);

 private:
  const bool writer_;
  const std::string dir_;
  const Config& config_;
  const int keep_;
  std::unique_ptr<RunLock> lock_;
  std::unique_ptr<CheckpointWriter> checkpoints_;
  std::unique_ptr<MetricsFile> metrics_;
  std::unique_ptr<RunReports> reports_;
  ProgressDisplay progress_;
};

}  // namespace cputrain::train
