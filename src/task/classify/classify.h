// Sequence classification: the job of Hugging Face's run_glue.py and run_classification.py as a
// task of the command core (task/task.h; docs/classification.md). Its pieces: table.h (CSV, TSV
// and JSON Lines files), glue.h (--task_name's columns, labels and metrics), labels.h (label
// lists, label2id, the problem type), features.h (texts and pairs to token ids as the fast
// tokenizers make them), metrics.h (evaluate's metrics); classify_task.cc puts them behind the
// Task interface.
#pragma once

#include <memory>

#include "task/task.h"

namespace cputrain::task {

std::unique_ptr<Task> MakeClassifyTask();

}  // namespace cputrain::task
