// The GLUE tasks run_glue.py knows by --task_name (its task_to_keys, and evaluate's "glue"
// metric): each task's text columns, its label names (the datasets' ClassLabel order: label 0
// first) and its metrics. STS-B is a regression.
#pragma once

#include <string>
#include <vector>

namespace cputrain::task {

struct GlueTask {
  const char* name;                  // "mrpc"
  const char* sentence1;             // the first text column
  const char* sentence2;             // the second, or null for a single sentence
  std::vector<const char*> labels;   // empty: a regression (stsb)
  std::vector<const char*> metrics;  // evaluate's glue metric keys, in its order
};

// The task of --task_name, or null; the names for messages ("cola, sst2, ...").
const GlueTask* FindGlueTask(const std::string& name);
std::string GlueTaskNames();

}  // namespace cputrain::task
