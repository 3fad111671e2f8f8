// cli/ internal: the one command core of the fine-tuning tasks (task/task.h). For each task of
// task::Tasks() it makes `cputrain-numa <task>` with `train`, `predict` and (where the task has
// one) `evaluate`, plus the task's own commands; every task command runs through the code here:
//
//   1. parse run_*.py's and the Trainer's flags (task::Args) and the task's own;
//   2. read and check every input the command will need before any work: the model's shape (its
//      family, its positions, a head of the task), the tokenizer, and each file the command will
//      read — the training file, and the validation and test files that --do_eval / --do_predict
//      will predict after training (issue 32, item 3) — and an --output_dir holding a run of
//      another model;
//   3. train: the config from the flags (placement and the rest from --config / --set), the
//      Trainer's step count and schedule, Train() on the task's rows (task/task_rows.h) as one
//      process of a job (train_job.h: MPI, SIGTERM's resume hint); messages name the command's
//      own flags (--train_file, --output_dir), not train's config keys (item 8);
//   4. the --output_dir run_*.py leaves: an HF directory (or a PEFT adapter) with the tokenizer,
//      then the predicted splits' files and eval_results.json.
//
// AddTaskCommands (commands.h) registers them; task_run.h runs them.
#pragma once

#include "cli/commands.h"
