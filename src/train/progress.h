// Progress of a run on stderr: a one-line bar redrawn in place when stderr is a terminal, plain
// lines otherwise (about 50 over a run, plus every evaluation), so logs stay readable.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace cputrain::train {

class ProgressDisplay {
 public:
  // bar: redraw one line (a terminal); otherwise print lines every `every` steps.
  ProgressDisplay(int total_steps, bool bar, bool quiet);
  ~ProgressDisplay();
  // tokens: seen so far (global); epoch: of the train data, from 0.
  void Step(int step, double loss, double tokens_per_s, double lr, uint64_t tokens, uint64_t epoch);
  void Eval(int step, double val_loss);
  void Message(const std::string& line);
  void Finish();

 private:
  void Clear();
  int total_;
  bool bar_, quiet_, drawn_ = false;
  int every_;
  std::chrono::steady_clock::time_point start_;
  double last_tps_ = 0;
};

// "3m12s", "45s", "1h02m"
std::string FormatEta(double seconds);
// "812", "45.3k", "1.20M", "3.40B"
std::string FormatCount(uint64_t n);

}  // namespace cputrain::train
