// cli/ internal: what the task commands run (task_command.h says the steps): train, and predict or
// evaluate a file, for any task (task/task.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "task/task.h"

namespace cputrain::cli {

// One task command's state: its task, the flags as parsed.
struct TaskCommand {
  std::unique_ptr<task::Task> task;
  task::Args args;
  std::vector<task::Option> options;  // the task's own (pointing into *task)
  CommonOptions common;               // --config, --set, --topology
  bool use_ipex = false;              // accepted, no effect
  std::string ddp_backend;
};

// `<task> train`: reads every input, trains, writes the output_dir, then predicts the validation
// file (--do_eval) and the test file (--do_predict). command_line: for a stopped run's hint.
void RunTaskTrain(TaskCommand& c, const std::string& command_line);

// `<task> predict` / `<task> evaluate`: predicts the file of `kind` with --model_name_or_path
// (and --adapter) and writes what the task writes of it.
void RunTaskPredict(TaskCommand& c, task::Command command, task::SplitKind kind);

}  // namespace cputrain::cli
