// A training run as the tests drive it (resume_test.cc, reports_test.cc): Train() quietly, and
// with stop_after > 0 a stop requested once that step is done, as SIGTERM requests one.
#pragma once

#include <string>
#include <vector>

#include "common/stop.h"
#include "config/config.h"
#include "model/checkpoint_path.h"
#include "train/train_state.h"
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

// The optimizer's state in out_dir's newest checkpoint: each slot's whole vector, in file order.
inline std::vector<std::vector<float>> ReadOptimizerState(const std::string& out_dir) {
  train::TrainStateReader r(model::ResolveCheckpointDir(out_dir) + "/" + model::kStateFile);
  std::vector<optim::Slot> slots;
  for (const auto& rec : r.slots())
    slots.push_back({rec.name, rec.floats, rec.floats, {{0, 0, rec.floats}}});
  r.CheckSlots(r.optimizer(), slots);
  std::vector<std::vector<float>> state;
  std::vector<float*> out;
  for (const optim::Slot& slot : slots) out.push_back(state.emplace_back(slot.full).data());
  r.ReadSlots(slots, out);
  return state;
}

}  // namespace cputrain::test
