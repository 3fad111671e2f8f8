// The run's reports (train/reports.h, report/tensorboard.h): TensorBoard event records framed
// and read back (a torn tail or a flipped bit ends the read, whole records stay), a reopened
// file keeping only the steps up to a resume; and end to end, a run with train.report_to:
// tensorboard stopped after step 7 (as by SIGTERM), its event file then torn by a half-written
// record, resumed from its step-6 checkpoint to step 12: every step's scalars once, in order, equal
// to metrics.jsonl's rows, and trainer_state.json's log_history one entry per row; a task's
// evaluation after training reported once, also when the finished command runs again.
// TensorBoard's own reader reads the files in tests/reference/tensorboard_check.py.
#include "train/reports.h"

#include <gtest/gtest.h>

#include <climits>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/files.h"
#include "common/stop.h"
#include "config/config.h"
#include "report/tensorboard.h"
#include "test_util.h"
#include "train/trainer.h"
#include "train_run.h"

namespace cputrain::train {
namespace {

using ::cputrain::test::TrainFor;
using nlohmann::json;
using report::Event;

std::string Fixture(const std::string& file) {
  return std::string(CPUTRAIN_SOURCE_DIR) + "/tests/reference/fixtures/odd/" + file;
}

Config RunConfig(const std::string& out_dir) {
  return LoadConfig(
      Fixture("config.yaml"),
      {"model.init_from=" + Fixture("model.bin"), "data.train=" + Fixture("train.bin"),
       "data.val=" + Fixture("val.bin"), "train.out_dir=" + out_dir, "train.steps=12",
       "train.eval_every=5", "train.checkpoint_every=3", "train.report_to=tensorboard"});
}

std::vector<json> Rows(const std::string& out_dir) {
  std::ifstream in(out_dir + "/metrics.jsonl");
  std::vector<json> rows;
  for (std::string line; std::getline(in, line);) rows.push_back(json::parse(line));
  return rows;
}

TEST(TensorBoard, RecordsRoundTripAndATornOrFlippedTailEndsTheRead) {
  const Event a{1.5e9, 3, "", {{"train/loss", 2.5f}, {"train/learning_rate", 1e-4f}}};
  const Event b{1.5e9 + 1, 4, "", {{"eval/loss", 3.25f}}};
  const std::string ra = report::FrameRecord(report::EncodeEvent(a));
  const std::string rb = report::FrameRecord(report::EncodeEvent(b));
  std::size_t whole = 0;
  std::vector<Event> e = report::ReadEvents(ra + rb, &whole);
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(whole, ra.size() + rb.size());
  EXPECT_EQ(e[0].wall_time, a.wall_time);
  EXPECT_EQ(e[0].step, 3);
  EXPECT_EQ(e[0].scalars, a.scalars);
  EXPECT_EQ(e[1].scalars, b.scalars);
  for (std::size_t cut = 1; cut < rb.size(); ++cut) {
    e = report::ReadEvents(ra + rb.substr(0, cut), &whole);
    ASSERT_EQ(e.size(), 1u) << "cut at " << cut;
    EXPECT_EQ(whole, ra.size());
  }
  for (std::size_t bit = 0; bit < 8 * rb.size(); bit += 7) {
    std::string flipped = ra + rb;
    flipped[ra.size() + bit / 8] ^= static_cast<char>(1 << (bit % 8));
    EXPECT_EQ(report::ReadEvents(flipped).size(), 1u) << "bit " << bit;
  }
}

TEST(TensorBoard, AReopenedFileKeepsTheStepsUpToTheResumeAndDropsATornTail) {
  test::TempDir tmp;
  const std::string path = tmp.path() + "/runs/events.out.tfevents.x";
  {
    report::EventFileWriter w(path, nullptr);
    for (int s = 1; s <= 6; ++s) w.Scalars(s, {{"train/loss", static_cast<float>(s)}});
  }
  std::ofstream(path, std::ios::app) << std::string("\x20\0\0\0\0\0\0\0torn", 12);
  {
    report::EventFileWriter w(path, [](const Event& e) { return e.step <= 4; });
    w.Scalars(5, {{"train/loss", 50.f}});
  }
  const std::vector<Event> e = report::ReadEvents(test::Slurp(path));
  ASSERT_EQ(e.size(), 6u);  // file_version, steps 1-4, the new 5
  EXPECT_EQ(e[0].file_version, report::kEventFileVersion);
  for (int s = 1; s <= 5; ++s) EXPECT_EQ(e[s].step, s);
  EXPECT_EQ(e[5].scalars[0].second, 50.f);
  report::EventFileWriter fresh(path, nullptr);  // a new run starts the file over
  EXPECT_EQ(report::ReadEvents(test::Slurp(path)).size(), 1u);
}

TEST(TensorBoard, AStoppedTornAndResumedRunReportsEveryStepOnce) {
  test::TempDir tmp;
  const Config c = RunConfig(tmp.path());
  const TrainResult first = TrainFor(c, 7);
  ASSERT_TRUE(first.stopped);
  ASSERT_EQ(first.last_step, 7);
  const std::string events = tmp.path() + "/" + kEventFile;
  // A writer killed mid-record leaves part of one.
  const std::string half = report::FrameRecord(report::EncodeEvent({1, 8, "", {{"x", 1.f}}}));
  std::ofstream(events, std::ios::app) << half.substr(0, half.size() / 2);
  // Resumed from the checkpoint before the last (step 6): the events of step 7 go too.
  Config again = c;
  again.train.resume = tmp.path() + "/checkpoints/step_00000006";
  const TrainResult second = TrainFor(again, 0);
  ASSERT_EQ(second.resumed_from, 6);
  ASSERT_EQ(second.last_step, 12);

  const std::vector<json> rows = Rows(tmp.path());
  const std::vector<Event> e = report::ReadEvents(test::Slurp(events));
  ASSERT_EQ(e.size(), rows.size() + 1) << "one event per metrics row, after file_version";
  EXPECT_EQ(e[0].file_version, report::kEventFileVersion);
  std::map<std::string, int> steps_seen;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Event& ev = e[i + 1];
    const json& row = rows[i];
    EXPECT_EQ(ev.step, row["step"].get<int>());
    std::map<std::string, float> s(ev.scalars.begin(), ev.scalars.end());
    if (row.contains("loss")) {
      ++steps_seen["train " + std::to_string(ev.step)];
      EXPECT_EQ(s.at("train/loss"), row["loss"].get<float>());
      EXPECT_EQ(s.at("train/learning_rate"), row["lr"].get<float>());
      EXPECT_EQ(s.at("train/grad_norm"), row["grad_norm"].get<float>());
      EXPECT_EQ(s.at("train/tokens_per_second"), row["tokens_per_s"].get<float>());
      EXPECT_EQ(s.at("train/epoch"), row["epoch"].get<float>());
    } else {
      ++steps_seen["eval " + std::to_string(ev.step)];
      EXPECT_EQ(s.at("eval/loss"), row["val_loss"].get<float>());
    }
  }
  for (int step = 1; step <= 12; ++step) EXPECT_EQ(steps_seen["train " + std::to_string(step)], 1);
  EXPECT_EQ(steps_seen["eval 5"], 1);
  EXPECT_EQ(steps_seen["eval 10"], 1);

  // A task's metrics after training, beside the run's rows.
  ReportEvalMetrics(c, 12, {{"eval_exact_match", 81.25}, {"eval_f1", 88.5}});
  const std::vector<Event> after = report::ReadEvents(test::Slurp(events));
  ASSERT_EQ(after.size(), e.size() + 1);
  EXPECT_EQ(after.back().step, 12);
  EXPECT_EQ(after.back().scalars, (std::vector<std::pair<std::string, float>>{
                                      {"eval/exact_match", 81.25f}, {"eval/f1", 88.5f}}));
  const json state = json::parse(test::Slurp(tmp.path() + "/" + kTrainerStateFile));
  const json& log = state["log_history"];
  ASSERT_EQ(log.size(), rows.size() + 1);
  EXPECT_EQ(state["global_step"], 12);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(log[i]["step"], rows[i]["step"]) << i;
    if (rows[i].contains("loss")) {
      EXPECT_EQ(log[i]["loss"], rows[i]["loss"]) << i;
      EXPECT_EQ(log[i]["learning_rate"], rows[i]["lr"]) << i;
      EXPECT_EQ(log[i]["grad_norm"], rows[i]["grad_norm"]) << i;
    } else {
      EXPECT_EQ(log[i]["eval_loss"], rows[i]["val_loss"]) << i;
    }
  }
  EXPECT_EQ(log.back()["eval_f1"], 88.5);
  EXPECT_EQ(Rows(tmp.path()).back()["eval_exact_match"], 81.25);

  // The finished run's command again: it resumes at step 12, trains nothing, and its evaluation
  // replaces the first instead of adding a second at the same step.
  const TrainResult third = TrainFor(c, 0);
  ASSERT_EQ(third.resumed_from, 12);
  ReportEvalMetrics(c, 12, {{"eval_exact_match", 82.5}, {"eval_f1", 89.0}});
  int task_rows = 0, task_events = 0;
  for (const json& row : Rows(tmp.path())) {
    if (!row.contains("eval_f1")) continue;
    ++task_rows;
    EXPECT_EQ(row["eval_f1"], 89.0);
  }
  for (const Event& ev : report::ReadEvents(test::Slurp(events)))
    for (const auto& [tag, value] : ev.scalars) task_events += tag == "eval/f1";
  EXPECT_EQ(task_rows, 1);
  EXPECT_EQ(task_events, 1);
  EXPECT_EQ(json::parse(test::Slurp(tmp.path() + "/" + kTrainerStateFile))["log_history"].size(),
            rows.size() + 1);
}

}  // namespace
}  // namespace cputrain::train
