// A training run as the tests drive it (resume_test.cc, reports_test.cc): Train() quietly, and
// with stop_after > 0 a stop requested once that step is done, as SIGTERM requests one.
#pragma once

#include "common/stop.h"
#include "config/config.h"
#include "train/trainer.h"

namespace cputrain::test {

inline train::TrainResult TrainFor(const Config& c, int stop_after = 0) {
  StopToken stop;
  int steps = 0;
  train::TrainOptions o;
  o.progress = train::Progress::kQuiet;
  o.stop = &stop;
  o.step_probe = [&](bool begin) {
    if (!begin && ++steps == stop_after) stop.Request(15);
  };
  return train::Train(c, o);
}

}  // namespace cputrain::test
