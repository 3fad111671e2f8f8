// train/reports.h: what a run reports to other tools, made from the rows of its metrics.jsonl
// (train/run_outputs.h) as they are written (docs/formats.md, "TensorBoard event files"):
//
//   out_dir/runs/events.out.tfevents.cputrain-numa   with train.report_to: tensorboard — a
//       TensorBoard event file (report/tensorboard.h) under Hugging Face TensorBoardCallback's
//       tags: train/loss, train/learning_rate, train/grad_norm, train/epoch,
//       train/tokens_per_second (ours), eval/loss, and eval/<metric> for a task's metrics
//       (eval/exact_match, eval/f1, eval/accuracy); one event per row, at the row's step
//   out_dir/trainer_state.json   always: Hugging Face Trainer's TrainerState (log_history: one
//       entry per row, {"loss", "learning_rate", "grad_norm", "epoch", "step"} or
//       {"eval_loss", "epoch", "step"} or a task's {"eval_<metric>", ...}), rewritten atomically
//       with each checkpoint and at the end of the run
//
// A resumed run keeps what metrics.jsonl keeps: the rows, events and log entries of steps up to
// its checkpoint's (a torn event record, or events of steps after the checkpoint, are dropped),
// except a task's evaluation after training (rows of eval_* metrics), which the resumed run
// makes again; so no step and no evaluation is reported twice.
//
// Thread safety: the writer's main thread only.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/config.h"

namespace cputrain::report {
class EventFileWriter;
}

namespace cputrain::train {

inline constexpr char kEventFile[] = "runs/events.out.tfevents.cputrain-numa";
inline constexpr char kTrainerStateFile[] = "trainer_state.json";

// train.report_to asks for TensorBoard ("tensorboard" or "all").
bool ReportsToTensorBoard(const Config& c);
// A metrics.jsonl row of a task's evaluation after training: it holds an "eval_*" metric.
bool IsTaskEvalRow(const nlohmann::json& row);

class RunReports {
 public:
  // resumed_step < 0: a fresh run (a new event file); else the run resumed from that step, and
  // metrics.jsonl (already cut back to it) holds the rows kept; kAppend: after the run, every
  // row and event kept.
  static constexpr int kAppend = -2;
  RunReports(const Config& c, int resumed_step);
  ~RunReports();
  // A row as written to metrics.jsonl.
  void Row(const nlohmann::json& row);
  // Writes trainer_state.json.
  void SaveState();

 private:
  const Config& config_;
  std::unique_ptr<report::EventFileWriter> events_;
  std::vector<nlohmann::json> log_history_;
  nlohmann::json last_step_row_ = nlohmann::json::object();  // the newest training step's row
};

// A task's evaluation after training (qa train's exact match and F1, classification's accuracy):
// `metrics` ({"eval_exact_match": 81.2, ...}, each key starting "eval_") at `step` become a
// metrics.jsonl row, TensorBoard scalars (with train.report_to: tensorboard) and
// trainer_state.json entries, beside the run's. Throws as common/files.h's writers do.
void ReportEvalMetrics(const Config& c, int step, const nlohmann::json& metrics);

}  // namespace cputrain::train
