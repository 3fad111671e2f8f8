// Extractive question answering (SQuAD): Hugging Face's run_qa.py job as a task of the command
// core (task/task.h; docs/question-answering.md). The task's pieces: squad.h (the files),
// squad_features.h (run_qa.py's features), squad_eval.h (utils_qa.py's post-processing and the
// official metrics); qa_task.cc puts them behind the Task interface, qa_commands.cc adds
// `qa features` and `qa evaluate`.
#pragma once

#include <memory>
#include <vector>

#include "task/task.h"

namespace cputrain::task {

std::unique_ptr<Task> MakeQaTask();

// `qa features` (run_qa.py's preprocessing, counted or dumped) and `qa evaluate` (the official
// SQuAD scripts) (qa_commands.cc).
std::vector<Extra> QaExtras();

}  // namespace cputrain::task
